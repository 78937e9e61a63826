"""Settings of the router function, read once from environment variables at init.

The routing table maps the ``model`` a client sends to the qualified ARN of the inference alias that
serves it, so several models can be deployed side by side, each its own SnapStart function::

    SNAPLLM_ROUTES='{"smollm2-135m-instruct": "arn:aws:lambda:...:function:snapllm-Inference:live"}'
    settings = RouterSettings.from_env()
    settings.routes["smollm2-135m-instruct"], settings.default_model, settings.max_body_bytes
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from snapllm.config import _bool, _get, _int
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

    @staticmethod
    def parse_routes(raw: str | None) -> dict[str, str]:
        if raw is None:
            return {}
        try:
            routes = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"SNAPLLM_ROUTES is not valid JSON: {exc.msg}") from None
        if not isinstance(routes, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in routes.items()
        ):
            raise ConfigurationError('SNAPLLM_ROUTES must be a JSON object {"model name": "alias ARN"}')
        return routes

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> RouterSettings:
        routes = cls.parse_routes(_get(env, "SNAPLLM_ROUTES"))
        # A second stack's models join the table through SNAPLLM_EXTRA_ROUTES (same shape).
        routes.update(cls.parse_routes(_get(env, "SNAPLLM_EXTRA_ROUTES")))
        timeout = _get(env, "SNAPLLM_INVOKE_TIMEOUT_S")
        try:
            invoke_timeout_s = float(timeout) if timeout is not None else cls.invoke_timeout_s
        except ValueError:
            raise ConfigurationError(f"SNAPLLM_INVOKE_TIMEOUT_S must be a number, got {timeout!r}") from None
        return cls(
            routes=routes,
            default_model=_get(env, "SNAPLLM_DEFAULT_MODEL"),
            max_body_bytes=_int(env, "SNAPLLM_MAX_BODY_BYTES", cls.max_body_bytes),
            max_prompt_chars=_int(env, "SNAPLLM_MAX_PROMPT_CHARS", cls.max_prompt_chars),
            max_tokens=_int(env, "SNAPLLM_MAX_TOKENS", cls.max_tokens),
            invoke_timeout_s=invoke_timeout_s,
            invoke_max_attempts=_int(env, "SNAPLLM_INVOKE_MAX_ATTEMPTS", cls.invoke_max_attempts),
            log_prompts=_bool(env, "SNAPLLM_LOG_PROMPTS", cls.log_prompts),
            service=_get(env, "POWERTOOLS_SERVICE_NAME") or cls.service,
            metrics_namespace=_get(env, "POWERTOOLS_METRICS_NAMESPACE") or cls.metrics_namespace,
        )
