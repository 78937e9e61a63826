"""Settings of the streaming function's web app, read from environment variables by ``create_app``.

The function loads its model from the inference function's variables
(:data:`~snapllm.inference.settings.INFERENCE_ENVIRONMENT`); these are the app's own::

    settings = StreamingEnvironment.from_env()
    settings.max_body_bytes, settings.stream_timeout_s, settings.service
"""

from __future__ import annotations

from pydantic import Field

from snapllm.environment import EnvironmentSettings

DEFAULT_MAX_BODY_BYTES = 256 * 1024
# Without LWA's context header (local runs) generation is bounded by this, like the function timeout.
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SERVICE = "snapllm-stream"
DEFAULT_METRICS_NAMESPACE = "snapllm"


class StreamingEnvironment(EnvironmentSettings):
    """The streaming app's variables (besides the inference function's, which load the model)."""

    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1)
    """Largest request body accepted, in bytes."""
    stream_timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    """Longest a generation may take, in seconds, when a request carries no invoke deadline (local runs);
    the template sets the function timeout."""
    service: str = Field(DEFAULT_SERVICE, validation_alias="POWERTOOLS_SERVICE_NAME")
    """Service name of the app's metrics (Powertools)."""
    metrics_namespace: str = Field(DEFAULT_METRICS_NAMESPACE, validation_alias="POWERTOOLS_METRICS_NAMESPACE")
    """CloudWatch namespace of the app's metrics."""
