"""CORS as a deployment answers it, for ``snapllm local serve --cors-origin``: the HTTP API's
``CorsConfiguration`` and the streaming Function URL's ``Cors``, read from the template.

    template = sam.load(path, overrides={CORS_PARAMETER: "https://app.example.com"})
    CorsPolicies.of(template).http_api.apply(request_headers, response_headers, preflight=True)

docs/api-keys.md ("CORS", "Locally") says which headers each answer gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from snapllm_dev.local.kinds import Kind, of_kind
from snapllm_dev.sam import Template

#: The template parameter that lists the origins.
CORS_PARAMETER = "CorsAllowedOrigins"
ORIGIN = "origin"
REQUEST_METHOD = "access-control-request-method"


def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
    """A browser's preflight: OPTIONS with an ``Origin`` and an ``Access-Control-Request-Method``."""
    return method == "OPTIONS" and ORIGIN in headers and REQUEST_METHOD in headers


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class CorsPolicy:
    """One service's CORS configuration (the properties of ``AWS::Lambda::Url``'s ``Cors``; an HTTP API's
    ``CorsConfiguration`` has the same names)."""

    allow_origins: tuple[str, ...]
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int | None = None
    allow_credentials: bool = False

    @classmethod
    def of(cls, config: Any) -> CorsPolicy | None:
        """The policy of a configuration as the template resolves it; None where there is none."""
        if not isinstance(config, Mapping) or not _names(config.get("AllowOrigins")):
            return None
        max_age = config.get("MaxAge")
        return cls(
            allow_origins=_names(config.get("AllowOrigins")),
            allow_methods=_names(config.get("AllowMethods")),
            allow_headers=_names(config.get("AllowHeaders")),
            expose_headers=_names(config.get("ExposeHeaders")),
            max_age=int(max_age) if isinstance(max_age, int | str) and str(max_age).isdigit() else None,
            allow_credentials=config.get("AllowCredentials") is True,
        )

    def allows(self, origin: str) -> bool:
        return "*" in self.allow_origins or origin in self.allow_origins

    def apply(
        self, request: Mapping[str, str], response: MutableMapping[str, str], *, preflight: bool
    ) -> None:
        """Put this policy's headers on ``response`` (a preflight's or another request's), for ``request``'s
        ``Origin``; the response's own CORS headers go first."""
        for name in [name for name in response if name.lower().startswith("access-control-")]:
            del response[name]
        origin = request.get(ORIGIN)
        if origin is None or not self.allows(origin):
            return
        headers = {"access-control-allow-origin": "*" if "*" in self.allow_origins else origin}
        if self.allow_credentials:
            headers["access-control-allow-credentials"] = "true"
        if preflight:
            headers |= _listed("access-control-allow-methods", self.allow_methods)
            headers |= _listed("access-control-allow-headers", self.allow_headers)
            if self.max_age is not None:
                headers["access-control-max-age"] = str(self.max_age)
        else:
            headers |= _listed("access-control-expose-headers", self.expose_headers)
        response.update(headers)


def _listed(name: str, values: Iterable[str]) -> dict[str, str]:
    text = ",".join(values)
    return {name: text} if text else {}


@dataclass(frozen=True)
class CorsPolicies:
    """The CORS of a template's two front doors, and whether its HTTP API takes OPTIONS past the
    authorizer (a route ``OPTIONS /...`` without authorization, as ``HttpApiPreflightRoute``)."""

    http_api: CorsPolicy | None = None
    function_url: CorsPolicy | None = None
    options_unauthenticated: bool = False

    @classmethod
    def of(cls, template: Template) -> CorsPolicies:
        api = next(
            (
                CorsPolicy.of(template.resolve(resource.get("Properties", {}).get("CorsConfiguration")))
                for _name, resource in template.resources("AWS::ApiGatewayV2::Api")
                if _exists(template, resource)
            ),
            None,
        )
        adapters = of_kind(template, Kind.WEB_ADAPTER)
        url = (adapters[0].properties.get("FunctionUrlConfig") or {}) if adapters else {}
        options = any(
            str(template.resolve(properties.get("RouteKey", ""))).startswith("OPTIONS ")
            and template.resolve(properties.get("AuthorizationType")) == "NONE"
            for _name, resource in template.resources("AWS::ApiGatewayV2::Route")
            if _exists(template, resource) and isinstance(properties := resource.get("Properties"), Mapping)
        )
        return cls(api, CorsPolicy.of(url.get("Cors")), options)


def _exists(template: Template, resource: Mapping[str, Any]) -> bool:
    condition = resource.get("Condition")
    return condition is None or template.condition(str(condition)) is not False
