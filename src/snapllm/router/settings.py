"""Settings of the router function, read once from environment variables (:class:`RouterEnvironment`).

The routing table maps the ``model`` a client sends to the qualified ARN of the inference alias that
serves it, so several models can be deployed side by side, each its own SnapStart function; or to the base
URL of an always-on OpenAI-compatible endpoint (llama-server, vLLM) that serves it instead. A fallback
order names, per model, the routes to try when its target is throttled (429) or unavailable (503)::

    SNAPLLM_ROUTES='{"smollm2-135m-instruct": "arn:aws:lambda:...:function:snapllm-Inference:live",
                     "smollm2-always-on": "https://llm.internal.example/v1"}'
    SNAPLLM_FALLBACKS='{"smollm2-always-on": ["smollm2-135m-instruct"]}'
    settings = RouterSettings.from_env()
    settings.routes["smollm2-135m-instruct"], settings.default_model, settings.max_body_bytes
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    endpoint_secret_arn: str | None = None
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
        for model, order in self.fallbacks.items():
            unknown = [name for name in (model, *order) if name not in self.routes]
            if unknown or model in order:
                raise ConfigurationError(
                    f"SNAPLLM_FALLBACKS for {model!r} must name other routes of the routing table "
                    f"({', '.join(sorted(self.routes)) or 'empty'}); not {', '.join(unknown) or model!r}"
                )
        if not 0 < self.invoke_timeout_s < API_GATEWAY_LIMIT_S:
            raise ConfigurationError(
                f"SNAPLLM_INVOKE_TIMEOUT_S must be between 0 and {API_GATEWAY_LIMIT_S:g} "
                "(API Gateway's limit)"
            )

    def targets(self, model: str) -> tuple[str, ...]:
        """The routes to try for ``model``, in order: its own, then its fallbacks."""
        return (model, *self.fallbacks.get(model, ()))

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
    routes its own model); a target may instead be an always-on OpenAI-compatible endpoint's base URL
    (`https://host/v1`), which gets the routing-table name as `model`."""
    extra_routes: _Routes | None = Field(None, json_schema_extra={"unset": "no routes"})
    """More routes of the same shape, e.g. a second stack's models; a name in both tables takes this one."""
    fallbacks: Json[dict[_Name, list[_Name]]] | None = Field(None, json_schema_extra={"unset": "none"})
    """Fallback order: `{"model name": ["other route", ...]}`; on a 429 or 503 from a model's target the
    request goes to the next route (as that route's model), and the `TargetFallback` metric counts it."""
    endpoint_secret_arn: str | None = Field(None, json_schema_extra={"unset": "no key"})
    """Secrets Manager secret holding the API key of the always-on endpoints (the secret string, or JSON
    with `api_key`); sent as `Authorization: Bearer`."""
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
        fallbacks = {model: tuple(order) for model, order in (self.fallbacks or {}).items()}
        return RouterSettings(
            **self.model_dump(exclude={"routes", "extra_routes", "fallbacks"}),
            routes=routes,
            fallbacks=fallbacks,
        )
