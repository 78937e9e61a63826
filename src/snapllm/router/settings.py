"""Settings of the router function (:class:`RouterSettings`), read once from environment variables
(:class:`RouterEnvironment`).

    settings = RouterSettings.from_env()     # SNAPLLM_ROUTES, SNAPLLM_FALLBACKS, the limits...
    settings.routes["smollm2-135m-instruct"], settings.default_model, settings.max_body_bytes

docs/api.md says how a request's ``model`` is routed and falls back; docs/configuration.md has each variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from snapllm.environment import JSON_TEXT, EnvironmentSettings, Settings
from snapllm.errors import ConfigurationError

# API Gateway HTTP APIs give an integration at most 30 s; the invoke must give up before that so the
# router can still answer with a 504 of its own instead of API Gateway's bare 503.
API_GATEWAY_LIMIT_S = 30.0

_Name = Annotated[str, StringConstraints(min_length=1)]
# A JSON object {"model name": "qualified ARN of the inference alias"} in one variable.
_Routes = Annotated[dict[_Name, _Name], JSON_TEXT]


class RouterVariables(Settings):
    """The router's settings a deployment sets (``SNAPLLM_*`` and Powertools' variables)."""

    routes: _Routes = Field(default_factory=dict, json_schema_extra={"unset": "no routes"})
    """Routing table: a JSON object `{"model name": "qualified ARN of the inference alias"}` (the template
    routes its own model); a target may instead be an always-on OpenAI-compatible endpoint's base URL
    (`https://host/v1`), which gets the routing-table name as `model`."""
    fallbacks: Annotated[dict[_Name, tuple[_Name, ...]], JSON_TEXT] = Field(
        default_factory=dict, json_schema_extra={"unset": "none"}
    )
    """Fallback order: `{"model name": ["other route", ...]}`; on a 429 or 503 from a model's target the
    request goes to the next route (as that route's model), and the `TargetFallback` metric counts it."""
    endpoint_secret_arn: str | None = Field(None, json_schema_extra={"unset": "no key"})
    """Secrets Manager secret holding the API key of the always-on endpoints (the secret string, or JSON
    with `api_key`); sent as `Authorization: Bearer`."""
    default_model: str | None = Field(None, json_schema_extra={"unset": "first route"})
    """Model of a request that names none; must be in the routing table."""
    max_body_bytes: int = Field(256 * 1024, ge=1)
    """Largest request body accepted, in bytes."""
    max_prompt_chars: int = Field(32_000, ge=1)
    """Longest prompt (characters over all messages) accepted before invoking."""
    max_tokens: int = Field(512, ge=1)
    """Largest `max_tokens` a request may ask for."""
    invoke_timeout_s: float = Field(27.0, gt=0, lt=API_GATEWAY_LIMIT_S)
    """Longest an inference invoke may take, in seconds, counted from the request's arrival; below API
    Gateway's 30 s, so the router answers with a 504 of its own. The model stops its work by then, a
    prompt's evaluation included."""
    invoke_max_attempts: int = Field(3, ge=1)
    """Attempts per inference invoke (throttled invokes are retried)."""
    log_prompts: bool = False
    """Log request bodies (prompts) in the router's logs; prompts may be sensitive."""
    api_auth: Literal["IAM", "JWT", "KEY"] = "IAM"
    """How the HTTP API authenticates callers (the template's `ApiAuth`). With `KEY`, every request but a
    CORS preflight needs the Lambda authorizer's verdict that its key is valid, else OpenAI's 401."""
    service: str = Field("snapllm-router", validation_alias="POWERTOOLS_SERVICE_NAME")
    """Service name of the router's logs, traces and metrics (Powertools)."""
    metrics_namespace: str = Field("snapllm", validation_alias="POWERTOOLS_METRICS_NAMESPACE")
    """CloudWatch namespace of the router's metrics."""


class RouterSettings(RouterVariables):
    """Routing table and the limits checked before any inference is invoked."""

    owned_by: str = "snapllm"
    """`owned_by` of the models the router lists."""

    @model_validator(mode="after")
    def _routes_known(self) -> RouterSettings:
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
        return self

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


class RouterEnvironment(RouterVariables, EnvironmentSettings):
    """The router function's variables (the agent routes it mounts read their own,
    :class:`~snapllm.agent.settings.AgentRoutesEnvironment`)."""

    extra_routes: _Routes = Field(default_factory=dict, json_schema_extra={"unset": "no routes"})
    """More routes of the same shape, e.g. a second stack's models; a name in both tables takes this one."""

    def router_settings(self) -> RouterSettings:
        values = dict(self)
        extra_routes = values.pop("extra_routes")
        return RouterSettings(**{**values, "routes": {**self.routes, **extra_routes}})
