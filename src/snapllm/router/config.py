"""Settings of the router function, read once from environment variables (:class:`RouterEnvironment`).

The routing table maps the ``model`` a client sends to the qualified ARN of the inference alias that
serves it, so several models can be deployed side by side, each its own SnapStart function::

    SNAPLLM_ROUTES='{"smollm2-135m-instruct": "arn:aws:lambda:...:function:snapllm-Inference:live"}'
    settings = RouterSettings.from_env()
    settings.routes["smollm2-135m-instruct"], settings.default_model, settings.max_body_bytes
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, Json, StringConstraints

from snapllm.environment import EnvironmentSettings
from snapllm.errors import ConfigurationError

# API Gateway HTTP APIs give an integration at most 30 s; the invoke must give up before that so the
# router can still answer with a 504 of its own instead of API Gateway's bare 503.
API_GATEWAY_LIMIT_S = 30.0


@dataclass(frozen=True)
class RouterSettings:
    """Routing table and the limits checked before any inference is invoked."""

    routes: Mapping[str, str]
    default_model: str | None = None
    max_body_bytes: int = 256 * 1024
    max_prompt_chars: int = 32_000
    max_tokens: int = 512
    invoke_timeout_s: float = 27.0
    invoke_max_attempts: int = 3
    log_prompts: bool = False
    service: str = "snapllm-router"
    metrics_namespace: str = "snapllm"
    owned_by: str = "snapllm"

    def __post_init__(self) -> None:
        if self.default_model is not None and self.default_model not in self.routes:
            raise ConfigurationError(
                f"SNAPLLM_DEFAULT_MODEL {self.default_model!r} is not in the routing table "
                f"({', '.join(sorted(self.routes)) or 'empty'})"
            )
        if not 0 < self.invoke_timeout_s < API_GATEWAY_LIMIT_S:
            raise ConfigurationError(
                f"SNAPLLM_INVOKE_TIMEOUT_S must be between 0 and {API_GATEWAY_LIMIT_S:g} "
                "(API Gateway's limit)"
            )

    def resolve_model(self, requested: str | None) -> str | None:
        """The routing-table name for ``requested`` (the default model when the client sent none)."""
        if requested is None:
            return self.default_model or next(iter(self.routes), None)
        return requested if requested in self.routes else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> RouterSettings:
        return RouterEnvironment.from_env(env).router_settings()


_Name = Annotated[str, StringConstraints(min_length=1)]
# A JSON object {"model name": "qualified ARN of the inference alias"} in one variable.
_Routes = Json[dict[_Name, _Name]]


class RouterEnvironment(EnvironmentSettings):
    """The router function's variables, named as :class:`RouterSettings`' fields (the agent routes it
    mounts read their own, :class:`~snapllm.agent.settings.AgentRoutesEnvironment`)."""

    routes: _Routes | None = Field(None, json_schema_extra={"unset": "no routes"})
    """Routing table: a JSON object `{"model name": "qualified ARN of the inference alias"}` (the template
    routes its own model)."""
    extra_routes: _Routes | None = Field(None, json_schema_extra={"unset": "no routes"})
    """More routes of the same shape, e.g. a second stack's models; a name in both tables takes this one."""
    default_model: str | None = Field(None, json_schema_extra={"unset": "first route"})
    """Model of a request that names none; must be in the routing table."""
    max_body_bytes: int = Field(RouterSettings.max_body_bytes, ge=1)
    """Largest request body accepted, in bytes."""
    max_prompt_chars: int = Field(RouterSettings.max_prompt_chars, ge=1)
    """Longest prompt (characters over all messages) accepted before invoking."""
    max_tokens: int = Field(RouterSettings.max_tokens, ge=1)
    """Largest `max_tokens` a request may ask for."""
    invoke_timeout_s: float = Field(RouterSettings.invoke_timeout_s, gt=0, lt=API_GATEWAY_LIMIT_S)
    """Longest an inference invoke may take, in seconds; below API Gateway's 30 s, so the router answers
    with a 504 of its own."""
    invoke_max_attempts: int = Field(RouterSettings.invoke_max_attempts, ge=1)
    """Attempts per inference invoke (throttled invokes are retried)."""
    log_prompts: bool = RouterSettings.log_prompts
    """Log request bodies (prompts) in the router's logs; prompts may be sensitive."""
    service: str = Field(RouterSettings.service, validation_alias="POWERTOOLS_SERVICE_NAME")
    """Service name of the router's logs, traces and metrics (Powertools)."""
    metrics_namespace: str = Field(
        RouterSettings.metrics_namespace, validation_alias="POWERTOOLS_METRICS_NAMESPACE"
    )
    """CloudWatch namespace of the router's metrics."""

    def router_settings(self) -> RouterSettings:
        routes = {**(self.routes or {}), **(self.extra_routes or {})}
        return RouterSettings(**self.model_dump(exclude={"routes", "extra_routes"}), routes=routes)
