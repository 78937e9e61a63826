"""A local deployment: the local S3 endpoint with the model uploaded, and functions wired to it.

    with LocalDeployment.start(sam.load(Path("template.yaml"))) as deployment:
        with deployment.function("InferenceFunction") as function:
            function.init(); function.snapshot()

The model is uploaded with its SHA-256 as metadata, so every local init verifies it as a deployed one does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from snapllm.errors import ConfigurationError
from snapllm_dev.local.environment import check_strict_variables, function_environment
from snapllm_dev.local.kinds import MODEL_KEY_VARIABLE, MODEL_NAME_VARIABLE, model_function
from snapllm_dev.local.lifecycle import LocalFunction
from snapllm_dev.local.processes import Closing
from snapllm_dev.local.s3 import LocalS3
from snapllm_dev.packaged_models import default_model_path, is_default_model, served_name
from snapllm_dev.sam import Function, Template

LOCAL_MODEL_BUCKET = "snapllm-models-local"

# moto copies the whole object for every ranged GET (measured: 65-90 ms for a 1 KB range of a 98 MB
# object), so against the local endpoint one whole-object GET is fastest. Real S3 has no such per-range
# cost and a single connection is slow there, hence the 16 MiB x 8 defaults on AWS.
LOCAL_LOADER_ENVIRONMENT = {"SNAPLLM_S3_PART_SIZE_MB": "1024", "SNAPLLM_S3_CONCURRENCY": "1"}


@dataclass
class LocalDeployment(Closing):
    """The local stand-in for a deployed stack."""

    template: Template
    s3: LocalS3
    model_path: Path
    model_key: str
    model_sha256: str
    model_keys: tuple[str, ...] = field(default=())

    @classmethod
    def start(
        cls, template: Template, *, model_path: Path | None = None, s3: LocalS3 | None = None
    ) -> LocalDeployment:
        """Upload the model (``model_path``, default the packaged one) to ``s3`` (default a new endpoint);
        ``model_key`` is the key of :func:`~snapllm_dev.local.kinds.model_function`."""
        check_strict_variables()  # before the local S3 starts: a bad value fails at once, not after the load
        functions = [model_function(template), *template.functions]
        model_keys = tuple(dict.fromkeys(key for fn in functions if (key := _model_key(fn))))
        model_path = model_path or default_model_path()
        s3 = s3 or LocalS3.start()
        try:
            for key in model_keys:
                digest = s3.put_model(model_path, bucket=LOCAL_MODEL_BUCKET, key=key)
        except BaseException:
            s3.stop()
            raise
        return cls(template, s3, model_path, model_keys[0], digest, model_keys)

    def local_values(self, function: Function | None = None) -> dict[str, str]:
        """What only a deployment resolves, locally: the S3 endpoint and credentials, bucket, loader profile
        and model key (a function's own ``SNAPLLM_MODEL_KEY`` is kept: its model was uploaded under it), and
        the model's name where it is not the template's default model."""
        own = _model_key(function) if function is not None else None
        # The functions that serve or route this model: not one with a model key of its own (an embedding
        # model's), which keeps its name.
        serves = own in (None, self.model_key)
        named = function is None or (MODEL_NAME_VARIABLE in function.environment and serves)
        return {
            **self.s3.client_environment(),
            **LOCAL_LOADER_ENVIRONMENT,
            "SNAPLLM_MODEL_BUCKET": LOCAL_MODEL_BUCKET,
            MODEL_KEY_VARIABLE: own if own in self.model_keys else self.model_key,
            **(self.naming() if named else {}),
        }

    def naming(self) -> dict[str, str]:
        """The model's name as its functions serve and route it: the template's (``ModelName``) for the
        default model it names, the model's own (:func:`~snapllm_dev.packaged_models.served_name`) for any
        other, so a request names the model that answers it."""
        return model_naming(self.model_path)

    def environment(self, **overrides: str) -> dict[str, str]:
        """Variables that point a function at the local S3 endpoint and the uploaded model, under the
        caller's ``SNAPLLM_*`` variables and ``overrides`` (see :mod:`snapllm_dev.local.environment`)."""
        return function_environment(None, local=self.local_values(), overrides=overrides)

    def function(self, name: str, *, timeout_s: float | None = None, **overrides: str) -> LocalFunction:
        spec = self.template.function(name)
        return LocalFunction(spec, local=self.local_values(spec), overrides=overrides, timeout_s=timeout_s)

    def close(self) -> None:
        self.s3.stop()


def model_naming(model_path: Path | None) -> dict[str, str]:
    """:meth:`LocalDeployment.naming` of ``model_path`` (None: the default model), before it is uploaded."""
    if model_path is None or is_default_model(model_path):
        return {}
    return {MODEL_NAME_VARIABLE: served_name(model_path)}


def _model_key(function: Function) -> str | None:
    key = function.environment.get(MODEL_KEY_VARIABLE)
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"{function.name}: {MODEL_KEY_VARIABLE} must be a key, got {key}")
    return key
