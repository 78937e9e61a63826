"""How a function runs locally, decided by what the template says about it, never by its logical ID.

    kind_of(template, template.function("RouterFunction"))   # Kind.HTTP_API
    model_function(template).name                           # "InferenceFunction"

The first rule that matches decides:

1. :attr:`Kind.DURABLE`: the function has ``DurableConfig``. It runs as a durable execution on the SDK's
   testing runner (:mod:`snapllm_dev.local.durable`), with the agent workflow of this package.
2. :attr:`Kind.WEB_ADAPTER`: its code runs under Lambda Web Adapter (``AWS_LAMBDA_EXEC_WRAPPER`` is
   ``/opt/bootstrap``, or one of its layers is AWS's ``LambdaAdapterLayer...``). Its ASGI app (``app:app``
   in its CodeUri, what LWA's ``run.sh`` starts) runs under uvicorn behind ``snapllm local serve``.
3. :attr:`Kind.HTTP_API`: an API Gateway HTTP API invokes it: an ``HttpApi`` SAM event, or an
   ``AWS::ApiGatewayV2::Integration`` whose ``IntegrationUri`` names the function. It gets API Gateway
   events through the local stack (:mod:`snapllm_dev.local.stack`), with the router of this package.
4. :attr:`Kind.DIRECT`: anything else is invoked directly, through the Lambda lifecycle (init, snapshot,
   restore, invoke: :mod:`snapllm_dev.local.lifecycle`).

The *model function*, the one the local stack restores for the router and the agent to call, is a
:attr:`Kind.DIRECT` function that sets ``SNAPLLM_MODEL_KEY``: the first (in template order) that the
callers' variables name (the router's routing table ``SNAPLLM_ROUTES``, the agent's
``SNAPLLM_AGENT_INFERENCE_FUNCTION``), else the first such function in the template.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from snapllm.errors import ConfigurationError
from snapllm_dev.sam import Function, Template, references

MODEL_KEY_VARIABLE = "SNAPLLM_MODEL_KEY"
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
