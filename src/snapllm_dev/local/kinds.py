"""How a function runs locally, decided by what the template says about it, never by its logical ID.

    kind_of(template, template.function("RouterFunction"))   # Kind.HTTP_API
    model_function(template).name                           # "InferenceFunction"

The model function is the direct-invoke function with ``SNAPLLM_MODEL_KEY`` that the router and the agent
call. docs/testing.md ("The local stack") has the rules, in the order they are tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from snapllm.errors import ConfigurationError
from snapllm_dev.sam import Function, Template, references

MODEL_KEY_VARIABLE = "SNAPLLM_MODEL_KEY"
MODEL_NAME_VARIABLE = "SNAPLLM_MODEL_NAME"
WEB_ADAPTER_WRAPPER = "/opt/bootstrap"
WEB_ADAPTER_LAYER = ":layer:LambdaAdapterLayer"
HTTP_API_INTEGRATION = "AWS::ApiGatewayV2::Integration"


class Kind(StrEnum):
    """How a function is invoked, hence how it runs locally."""

    DURABLE = "durable"
    WEB_ADAPTER = "web adapter"
    HTTP_API = "HTTP API"
    DIRECT = "direct invoke"


def kind_of(template: Template, function: Function) -> Kind:
    if function.durable is not None:
        return Kind.DURABLE
    if runs_under_web_adapter(function):
        return Kind.WEB_ADAPTER
    if function.name in http_api_targets(template):
        return Kind.HTTP_API
    return Kind.DIRECT


def runs_under_web_adapter(function: Function) -> bool:
    wrapper = function.environment.get("AWS_LAMBDA_EXEC_WRAPPER")
    return wrapper == WEB_ADAPTER_WRAPPER or any(WEB_ADAPTER_LAYER in str(layer) for layer in function.layers)


def http_api_targets(template: Template) -> frozenset[str]:
    """Functions an HTTP API invokes: ``HttpApi`` events, and integrations of ``AWS::ApiGatewayV2`` APIs."""
    targets = {
        fn.name for fn in template.functions if any(e.get("Type") == "HttpApi" for e in fn.events.values())
    }
    for _, resource in template.resources(HTTP_API_INTEGRATION):
        targets |= references((resource.get("Properties") or {}).get("IntegrationUri"))
    return frozenset(targets)


def of_kind(template: Template, kind: Kind) -> list[Function]:
    """The template's functions of ``kind``, in template order."""
    return [fn for fn in template.functions if kind_of(template, fn) is kind]


def one_of_kind(template: Template, kind: Kind, *, named_by: Iterable[Function] = ()) -> Function:
    """The function of ``kind`` that ``named_by``'s variables name, else the first of that kind."""
    candidates = of_kind(template, kind)
    if not candidates:
        raise ConfigurationError(f"{template.path} has no {kind} function")
    return _first_named(candidates, named_by)


def model_function(template: Template, *, callers: Iterable[Function] | None = None) -> Function:
    """The function that loads the model (see the module's docstring); ConfigurationError if none does.

    ``callers`` are the functions whose variables name it; by default every HTTP API and durable function.
    """
    candidates = [fn for fn in of_kind(template, Kind.DIRECT) if MODEL_KEY_VARIABLE in fn.environment]
    if not candidates:
        raise ConfigurationError(
            f"{template.path}: no direct-invoke function sets {MODEL_KEY_VARIABLE} (none loads a model)"
        )
    if callers is None:
        callers = [fn for fn in template.functions if kind_of(template, fn) in {Kind.HTTP_API, Kind.DURABLE}]
    return _first_named(candidates, callers)


def _first_named(candidates: list[Function], callers: Iterable[Function]) -> Function:
    named = frozenset[str]().union(*(references(fn.environment) for fn in callers))
    return next((fn for fn in candidates if fn.name in named), candidates[0])
