import pytest

from snapllm.engine.settings import EngineSettings, LoaderSettings, MiB, ModelSource
from snapllm.errors import ConfigurationError
from snapllm.inference.settings import InferenceSettings, LoaderEnvironment

BASE = {"SNAPLLM_MODEL_BUCKET": "models", "SNAPLLM_MODEL_KEY": "llm/smollm2.Q4_1.gguf"}


def test_defaults_and_derived_model_name():
    settings = InferenceSettings.from_env(BASE)
    assert settings.model.uri == "s3://models/llm/smollm2.Q4_1.gguf"
    assert settings.model.name == "smollm2.Q4_1"
    assert settings.model.sha256 is None
    assert settings.loader == LoaderSettings()
    assert settings.engine.threads is None  # empty or unset: use the CPUs really available


def test_values_from_the_environment():
    env = {
        **BASE,
        "SNAPLLM_MODEL_SHA256": "AB" * 32,
        "SNAPLLM_MODEL_NAME": "smollm2",
        "SNAPLLM_S3_PART_SIZE_MB": "32",
        "SNAPLLM_S3_CONCURRENCY": "4",
        "SNAPLLM_N_CTX": "4096",
        "SNAPLLM_THREADS": "6",
        "SNAPLLM_LLAMA_VERBOSE": "true",
        "SNAPLLM_REPACK_WEIGHTS": "off",
    }
    settings = InferenceSettings.from_env(env)
    assert settings.model.sha256 == "ab" * 32
    assert settings.model.name == "smollm2"
    assert settings.loader.part_size == 32 * MiB
    assert settings.loader.concurrency == 4
    assert settings.engine == EngineSettings(n_ctx=4096, threads=6, verbose=True, repack_weights=False)


def test_template_style_empty_values_mean_default():
    settings = InferenceSettings.from_env({**BASE, "SNAPLLM_THREADS": "", "SNAPLLM_MODEL_SHA256": ""})
    assert settings.engine.threads is None
    assert settings.model.sha256 is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SNAPLLM_MODEL_KEY": "k"}, "SNAPLLM_MODEL_BUCKET must be set"),
        ({**BASE, "SNAPLLM_MODEL_SHA256": "abc"}, "64 hex digits"),
        ({**BASE, "SNAPLLM_N_CTX": "lots"}, "SNAPLLM_N_CTX must be an integer"),
        ({**BASE, "SNAPLLM_S3_CONCURRENCY": "0"}, "at least 1"),
        ({**BASE, "SNAPLLM_LLAMA_VERBOSE": "maybe"}, "true or false"),
    ],
)
def test_invalid_settings_are_named(env, message):
    with pytest.raises(ConfigurationError, match=message):
        InferenceSettings.from_env(env)


def test_model_source_uri():
    assert ModelSource(bucket="b", key="k.gguf").uri == "s3://b/k.gguf"


def test_loader_timeouts_and_the_failure_bound_they_give():
    loader = InferenceSettings.from_env(
        {**BASE, "SNAPLLM_S3_READ_TIMEOUT_S": "1.5", "SNAPLLM_S3_CONNECT_TIMEOUT_S": "2"}
    ).loader
    assert (loader.read_timeout_s, loader.connect_timeout_s) == (1.5, 2.0)
    # A x (C + R) + b x (2^A - 2) per part; one more attempt's time for the parts still in flight.
    defaults = LoaderSettings()
    assert defaults.part_failure_bound_s == pytest.approx(5 * (5 + 30) + 0.2 * 30)
    assert defaults.failure_bound_s == pytest.approx(181 + 35)
    with pytest.raises(ConfigurationError, match="SNAPLLM_S3_READ_TIMEOUT_S must be a number"):
        LoaderEnvironment.from_env({"SNAPLLM_S3_READ_TIMEOUT_S": "soon"}).loader_settings()
    with pytest.raises(ConfigurationError, match="at least"):
        LoaderEnvironment.from_env({"SNAPLLM_S3_READ_TIMEOUT_S": "0"}).loader_settings()
