"""A local deployment: the local S3 endpoint with the model uploaded, and functions wired to it.

    with LocalDeployment.start(Path("template.yaml")) as deployment:
        with deployment.function("InferenceFunction") as function:
            function.init(); function.snapshot()
            with function.restore() as environment:
                environment.invoke(event)

The model is uploaded under the key the template configures, with its SHA-256 as object metadata (as the
deploy instructions do), so every local init verifies the checksum like a deployed one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from snapllm.local.lifecycle import LocalFunction
from snapllm.local.s3 import LocalS3
from snapllm.local.template import FunctionSpec
from snapllm.models import default_model_path

LOCAL_MODEL_BUCKET = "snapllm-models-local"

# moto copies the whole object for every ranged GET (measured: 65-90 ms for a 1 KB range of a 98 MB
# object), so against the local endpoint one whole-object GET is fastest. Real S3 has no such per-range
# cost and a single connection is slow there, hence the 16 MiB x 8 defaults on AWS.
LOCAL_LOADER_ENVIRONMENT = {"SNAPLLM_S3_PART_SIZE_MB": "1024", "SNAPLLM_S3_CONCURRENCY": "1"}


@dataclass
class LocalDeployment:
    """The local stand-in for a deployed stack."""

    template: Path
    s3: LocalS3
    model_path: Path
    model_key: str
    model_sha256: str

    @classmethod
    def start(
        cls, template: Path, *, model_path: Path | None = None, s3: LocalS3 | None = None
    ) -> LocalDeployment:
        spec = FunctionSpec.from_template(template, "InferenceFunction")
        model_key = str(spec.environment["SNAPLLM_MODEL_KEY"])
        model_path = model_path or default_model_path()
        s3 = s3 or LocalS3.start()
        try:
            digest = s3.put_model(model_path, bucket=LOCAL_MODEL_BUCKET, key=model_key)
        except BaseException:
            s3.stop()
            raise
        return cls(template=template, s3=s3, model_path=model_path, model_key=model_key, model_sha256=digest)

    def environment(self, **overrides: str) -> dict[str, str]:
        """Variables that point a function at the local S3 endpoint and the uploaded model.

        ``SNAPLLM_*`` variables set in the caller's environment override the template's values, as
        ``sam local invoke --env-vars`` does; ``overrides`` win over both.
        """
        return {
            **self.s3.client_environment(),
            **LOCAL_LOADER_ENVIRONMENT,
            "SNAPLLM_MODEL_BUCKET": LOCAL_MODEL_BUCKET,
            "SNAPLLM_MODEL_KEY": self.model_key,
            **{k: v for k, v in os.environ.items() if k.startswith("SNAPLLM_")},
            **overrides,
        }

    def function(self, name: str, *, timeout_s: float | None = None, **overrides: str) -> LocalFunction:
        spec = FunctionSpec.from_template(self.template, name)
        return LocalFunction(spec, environment=self.environment(**overrides), timeout_s=timeout_s)

    def stop(self) -> None:
        self.s3.stop()

    def __enter__(self) -> LocalDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
