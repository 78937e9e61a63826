"""The functions' settings classes: variables, validation, error messages and the documented tables."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from snapllm.agent.settings import AgentSettings
from snapllm.engine.settings import PREFIX_CACHE_LOCAL_MB, EngineSettings, prefix_cache_bytes
from snapllm.errors import ConfigurationError
from snapllm.inference.settings import EngineEnvironment, InferenceSettings, LoaderEnvironment
from snapllm.router.settings import RouterEnvironment, RouterSettings
from snapllm.streaming.settings import StreamingEnvironment
from snapllm_dev.settings_doc import REGENERATE, generated_block, main, markdown_table, settings_classes

CONFIGURATION_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
MODEL = {"SNAPLLM_MODEL_BUCKET": "models", "SNAPLLM_MODEL_KEY": "llm/smollm2.gguf"}
AGENT = {"SNAPLLM_AGENT_ARTIFACTS_BUCKET": "artifacts"}


@pytest.mark.parametrize("cls", settings_classes(), ids=lambda cls: cls.__name__)
def test_every_variable_has_a_description(cls):
    undocumented = [name for name, field in cls.model_fields.items() if not (field.description or "").strip()]
    assert undocumented == [], f"{cls.__name__} fields without a description"


def test_every_variable_is_snapllm_or_powertools():
    names = [cls.variable_name(name) for cls in settings_classes() for name in cls.model_fields]
    assert all(name.startswith(("SNAPLLM_", "POWERTOOLS_")) for name in names), names


@pytest.mark.parametrize(
    ("read", "env", "message"),
    [
        (
            EngineEnvironment.from_env,
            {"SNAPLLM_THREADS": "0"},
            "SNAPLLM_THREADS must be at least 1, got '0'",
        ),
        (
            LoaderEnvironment.from_env,
            {"SNAPLLM_S3_CONNECT_TIMEOUT_S": "nan"},
            "SNAPLLM_S3_CONNECT_TIMEOUT_S",
        ),
        (
            InferenceSettings.from_env,
            {**MODEL, "SNAPLLM_N_BATCH": "1.5"},
            "SNAPLLM_N_BATCH must be an integer",
        ),
        (
            StreamingEnvironment.from_env,
            {"SNAPLLM_STREAM_TIMEOUT_S": "0"},
            "SNAPLLM_STREAM_TIMEOUT_S must be",
        ),
        (
            RouterSettings.from_env,
            {"SNAPLLM_INVOKE_TIMEOUT_S": "31"},
            "SNAPLLM_INVOKE_TIMEOUT_S must be less",
        ),
        (
            RouterSettings.from_env,
            {"SNAPLLM_EXTRA_ROUTES": "{not json"},
            "SNAPLLM_EXTRA_ROUTES is not valid JSON",
        ),
        (RouterSettings.from_env, {"SNAPLLM_ROUTES": '{"a": ""}'}, "SNAPLLM_ROUTES['a'] must not be empty"),
        (
            RouterSettings.from_env,
            {"SNAPLLM_LOG_PROMPTS": "perhaps"},
            "SNAPLLM_LOG_PROMPTS must be true or false",
        ),
        (
            AgentSettings.from_env,
            {**AGENT, "SNAPLLM_AGENT_CHUNK_BYTES": "8"},
            "SNAPLLM_AGENT_CHUNK_BYTES must be",
        ),
        (AgentSettings.from_env, {}, "SNAPLLM_AGENT_ARTIFACTS_BUCKET must be set"),
    ],
)
def test_a_bad_value_names_its_variable(read, env, message):
    with pytest.raises(ConfigurationError) as caught:
        read(env)
    assert message in str(caught.value)


def test_every_bad_value_is_named_at_once():
    with pytest.raises(ConfigurationError) as caught:
        InferenceSettings.from_env(
            {"SNAPLLM_N_CTX": "8", "SNAPLLM_S3_CONCURRENCY": "0", "SNAPLLM_WARMUP_TOKENS": "-1"}
        )
    assert "SNAPLLM_N_CTX must be at least 16" in str(caught.value)
    assert "SNAPLLM_WARMUP_TOKENS must be at least 0" in str(caught.value)
    assert "SNAPLLM_S3_CONCURRENCY must be at least 1" in str(caught.value)
    assert "SNAPLLM_MODEL_BUCKET must be set" in str(caught.value)


def test_an_explicit_mapping_is_all_that_is_read(monkeypatch):
    monkeypatch.setenv("SNAPLLM_N_CTX", "lots")
    assert InferenceSettings.from_env(MODEL).engine.n_ctx == 2048
    with pytest.raises(ConfigurationError, match="SNAPLLM_N_CTX"):
        InferenceSettings.from_env()  # os.environ


def test_any_batch_size_is_taken_and_only_bf16_values_make_attention_batch_invariant():
    for attention, invariant in (
        ({}, True),
        ({"SNAPLLM_REPACK_WEIGHTS": "false"}, True),
        ({"SNAPLLM_FLASH_ATTENTION": "false"}, False),
        ({"SNAPLLM_CACHE_TYPE_V": "f16"}, False),
    ):
        settings = InferenceSettings.from_env({**MODEL, **attention, "SNAPLLM_N_BATCH": "64"})
        assert settings.engine.n_batch == 64
        assert settings.engine.batch_invariant_attention is invariant


def test_values_are_stripped_and_blank_means_the_default():
    settings = InferenceSettings.from_env({**MODEL, "SNAPLLM_N_CTX": " 4096 ", "SNAPLLM_N_BATCH": "  "})
    assert (settings.engine.n_ctx, settings.engine.n_batch) == (4096, 512)


def test_powertools_variables_keep_their_names():
    env = {"POWERTOOLS_SERVICE_NAME": "svc", "POWERTOOLS_METRICS_NAMESPACE": "ns", "SNAPLLM_SERVICE": "no"}
    streaming = StreamingEnvironment.from_env(env)
    assert (streaming.service, streaming.metrics_namespace) == ("svc", "ns")
    assert StreamingEnvironment.from_env({}).service == "snapllm-stream"
    assert RouterSettings.from_env({}).service == "snapllm-router"


def test_units_in_variable_names_stay():
    assert InferenceSettings.from_env({**MODEL, "SNAPLLM_S3_PART_SIZE_MB": "4"}).loader.part_size == 4 << 20
    routes = RouterEnvironment.from_env(
        {"SNAPLLM_ROUTES": '{"a": "arn-a"}', "SNAPLLM_EXTRA_ROUTES": '{"b": "b"}'}
    )
    assert routes.router_settings().routes == {"a": "arn-a", "b": "b"}


def test_the_agent_reads_its_prefix():
    settings = AgentSettings.from_env({**AGENT, "SNAPLLM_AGENT_INFERENCE_FUNCTION": "arn:inf"})
    assert (settings.artifacts_bucket, settings.inference_function) == ("artifacts", "arn:inf")


def test_the_streaming_app_reads_its_settings(monkeypatch):
    from snapllm.streaming.app import create_app

    monkeypatch.setenv("SNAPLLM_MAX_BODY_BYTES", "1000")
    monkeypatch.setenv("SNAPLLM_STREAM_TIMEOUT_S", "5.5")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "stream-test")
    app = create_app(object(), timeout_s=10.0)  # type: ignore[arg-type]
    assert (app.max_body_bytes, app.timeout_s) == (1000, 10.0)
    assert (app.service, app.metrics_namespace) == ("stream-test", "snapllm")
    monkeypatch.setenv("SNAPLLM_STREAM_TIMEOUT_S", "soon")
    with pytest.raises(ConfigurationError, match="SNAPLLM_STREAM_TIMEOUT_S must be a number"):
        create_app(object())  # type: ignore[arg-type]


def test_the_agent_routes_read_their_settings(monkeypatch):
    from snapllm.agent import routes

    routes.configure(None)
    monkeypatch.delenv("SNAPLLM_AGENT_FUNCTION_ARN", raising=False)
    with pytest.raises(ConfigurationError, match="SNAPLLM_AGENT_FUNCTION_ARN"):
        routes._runs()
    monkeypatch.setenv(
        "SNAPLLM_AGENT_FUNCTION_ARN", "arn:aws:lambda:us-east-1:123456789012:function:agent:live"
    )
    monkeypatch.delenv("SNAPLLM_AGENT_ARTIFACTS_BUCKET", raising=False)
    with pytest.raises(ConfigurationError, match="SNAPLLM_AGENT_ARTIFACTS_BUCKET"):
        routes._runs()
    monkeypatch.setenv("SNAPLLM_AGENT_ARTIFACTS_BUCKET", "snapllm-models")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        assert routes._runs().function_arn.endswith(":agent:live")
    finally:
        routes.configure(None)


def test_the_documented_tables_are_the_generated_ones():
    documented, generated = generated_block(CONFIGURATION_PAGE.read_text(encoding="utf-8")), markdown_table()
    if documented != generated:
        diff = "".join(
            difflib.unified_diff(
                documented.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                "docs/configuration.md",
                "generated",
            )
        )
        pytest.fail(
            f"docs/configuration.md's tables differ from the settings classes:\n{diff}\n"
            f"Regenerate them with: {REGENERATE}"
        )


def test_the_command_prints_and_writes_the_tables(tmp_path, capsys):
    assert main([]) == 0
    assert capsys.readouterr().out == markdown_table()
    readme = tmp_path / "configuration.md"
    readme.write_text(f"# x\n\n{CONFIGURATION_PAGE.read_text(encoding='utf-8').split('# Configuration')[1]}")
    readme.write_text(readme.read_text().replace("SNAPLLM_N_CTX", "SNAPLLM_STALE"))
    assert main(["--write", str(readme)]) == 0
    assert generated_block(readme.read_text()) == markdown_table()
    assert readme.read_text().startswith("# x\n")
    assert main(["--write", str(tmp_path / "missing.md")]) == 2


def test_the_prefix_cache_takes_a_share_of_the_functions_memory_unless_set():
    assert EngineSettings().prefix_cache_mb is None
    assert prefix_cache_bytes(None, 3008) == 188 * 1024**2
    assert prefix_cache_bytes(None, 10240) == 640 * 1024**2
    assert prefix_cache_bytes(None, None) == PREFIX_CACHE_LOCAL_MB * 1024**2  # outside Lambda
    assert prefix_cache_bytes(0, 3008) == 0  # the live sequence alone
    assert EngineSettings(prefix_cache_mb=64).prefix_cache_bytes(3008) == 64 * 1024**2
