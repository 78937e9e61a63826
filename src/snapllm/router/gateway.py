"""What every route of the router does with a request: find its model, check its limits, invoke the model's
function (or the next target of its fallback order), and keep what the request's metrics and logs need."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.metrics import MetricUnit

from snapllm.errors import (
    DeadlineExceededError,
    InferenceNotReadyError,
    InferenceThrottledError,
    RequestError,
    UnknownModelError,
    UnsupportedParameterError,
)
from snapllm.inference.client import InferenceClient
from snapllm.protocol.completions.objects import ModelList
from snapllm.protocol.http.routes import ROUTE_KEY, routed_event
from snapllm.protocol.limits import Limits
from snapllm.protocol.metrics import add_completion_metrics, record_error, request_features
from snapllm.protocol.model_routes.embeddings import EmbeddingsRequest
from snapllm.protocol.model_routes.rerank import RerankRequest
from snapllm.protocol.model_routes.tokens import DetokenizeRequest, TokenizeRequest
from snapllm.protocol.requests import ChatCompletionRequest
from snapllm.protocol.responses.responses_api import AnyRequest, inference_request, responses_fields
from snapllm.router.settings import API_GATEWAY_LIMIT_S, RouterSettings

JSON = "application/json"
# A target that answers these is throttled or down: the request goes to the next target of its fallback order.
FALLBACK_ERRORS = (InferenceThrottledError, InferenceNotReadyError)
#: A request the router sends to a model as a routed event (it names the model, or none for the default).
RoutedRequest = (
    ChatCompletionRequest | TokenizeRequest | DetokenizeRequest | EmbeddingsRequest | RerankRequest
)
STREAMING_HINT = (
    "stream=true is served by the streaming endpoint (the function URL, see the stack outputs): "
    "API Gateway HTTP APIs buffer whole responses"
)
#: What a completion the router's deadline stopped before its first token may do instead.
STREAMING_ADVICE = (
    f"API Gateway gives a request {API_GATEWAY_LIMIT_S:g} s; a long prompt can stream (stream=true) from the "
    "streaming endpoint (the function URL, see the stack outputs), which is not bound by it"
)


@dataclass
class RequestRecord:
    """What the metrics and logs of one request need, filled in as the request is handled."""

    started: float = field(default_factory=time.perf_counter)
    #: When the request arrived (Unix epoch seconds): API Gateway's time limit counts from then.
    received: float = field(default_factory=time.time)
    route: str | None = None
    model: str | None = None
    error_type: str | None = None
    invoke_s: float = 0.0
    response: dict[str, Any] | None = None
    features: dict[str, str] | None = None
    ignored_fields: tuple[str, ...] = ()


class Gateway:
    """The routes' way to the models: one :class:`RequestRecord` per request (:meth:`begin`), the models'
    clients (``clients``, shared with the app), and the Powertools utilities the request reports to."""

    def __init__(
        self,
        settings: RouterSettings,
        clients: dict[str, InferenceClient],
        *,
        logger: Logger,
        metrics: Metrics,
        tracer: Tracer,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.logger = logger
        self.metrics = metrics
        self.tracer = tracer
        self.limits = Limits(max_tokens=settings.max_tokens, max_prompt_chars=settings.max_prompt_chars)
        self.record = RequestRecord()
        #: Requests sent on to the next target, per (failed target, next target); also a metric.
        self.fallbacks: Counter[tuple[str, str]] = Counter()
        self._created = int(time.time())

    def begin(self) -> RequestRecord:
        """A new request's record."""
        self.record = RequestRecord()
        return self.record

    def model_list(self) -> ModelList:
        return ModelList.of(self.settings.routes, created=self._created, owned_by=self.settings.owned_by)

    # --- Routes -------------------------------------------------------------------------------------------

    def complete(self, request: AnyRequest, route: str) -> Response[dict[str, Any]]:
        """A completion, Responses request or text completion, invoked on its model's targets in turn."""
        record = self.record
        record.features = request_features(inference_request(request))
        record.ignored_fields = request.ignored_fields
        if request.ignored_fields:
            self.logger.warning(
                "unknown request fields ignored", extra={"fields": list(request.ignored_fields)}
            )
        model = self._model(request.model, route)
        self._check_limits(request)
        # The request goes on as the client sent it (model included): the function checks it serves it.
        payload = request.model_dump(mode="json", exclude_unset=True)
        if self.settings.log_prompts:
            self.logger.info("prompt", extra={"request": payload})
        try:
            body = self._invoke(model, payload)
        except DeadlineExceededError as exc:
            raise DeadlineExceededError(f"{exc.message}; {STREAMING_ADVICE}") from exc
        self.logger.info(
            "completion",
            extra={
                "usage": body.get("usage"),
                "timings": body.get("timings"),
                "finish_reason": (body.get("choices") or [{}])[0].get("finish_reason", body.get("status")),
                "invoke_ms": round(record.invoke_s * 1000, 2),
            },
        )
        return json_response(200, body)

    def route_to_model(self, request: RoutedRequest, route: str) -> Response[dict[str, Any]]:
        """Invoke the model ``request`` names (or the default one) with a routed event of ``route``. No
        fallback: another model's tokens or vectors are not this one's."""
        model = self._model(request.model, route)
        if isinstance(request, ChatCompletionRequest):
            self.limits.check(request)  # what the completion would be refused for, before invoking
        payload = routed_event(route, request.model_dump(mode="json", exclude_unset=True))
        return json_response(200, self._invoke(model, payload))

    def _model(self, requested: str | None, route: str) -> str:
        """The model a request of ``route`` goes to, recorded, annotated and logged; an
        :class:`UnknownModelError` for a model no route serves."""
        record = self.record
        record.route = route
        model = self.settings.resolve_model(requested)
        record.model = model or requested
        self.tracer.put_annotation("route", route)
        self.tracer.put_annotation("model", record.model or "none")
        self.logger.append_keys(route=route, model=record.model)
        if model is None:
            raise UnknownModelError(
                f"the model {requested!r} does not exist; available: "
                f"{', '.join(sorted(self.settings.routes))}",
                param="model",
            )
        return model

    def _check_limits(self, request: AnyRequest) -> None:
        if request.stream:
            raise UnsupportedParameterError(STREAMING_HINT, param="stream")
        with responses_fields(request):
            self.limits.check(inference_request(request))

    # --- Invoking -----------------------------------------------------------------------------------------

    def deadline(self) -> float:
        """The route's deadline (Unix epoch seconds): the invoke timeout after the request arrived, within
        API Gateway's 30 s. The model stops its work by then, less its margin (a prompt's evaluation and a
        rerank's documents included), and answers with what it has or with a ``DeadlineExceededError``."""
        return self.record.received + self.settings.invoke_timeout_s

    def _invoke(self, model: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The model's target, then each of its fallbacks while one is throttled or down and time is left.
        A fallback gets the request as its own model's; a routed event has no fallback. The answer and the
        time it took are recorded."""
        deadline = self.deadline()
        targets = self.settings.targets(model) if ROUTE_KEY not in payload else (model,)
        invoked = time.perf_counter()
        try:
            for index, target in enumerate(targets):
                try:
                    with self.tracer.provider.in_subsegment("## invoke inference") as subsegment:
                        subsegment.put_annotation("model", target)
                        sent = payload if target == model else {**payload, "model": target}
                        self.record.response = self.clients[target].invoke(sent, deadline=deadline)
                        return self.record.response
                except FALLBACK_ERRORS as exc:
                    if index + 1 == len(targets) or time.time() >= deadline:
                        raise
                    self._count_fallback(model, target, targets[index + 1], exc)
            raise AssertionError("unreachable")
        finally:
            self.record.invoke_s = time.perf_counter() - invoked

    def _count_fallback(self, model: str, failed: str, next_target: str, error: Exception) -> None:
        self.fallbacks[(failed, next_target)] += 1
        self.metrics.add_metric("TargetFallback", MetricUnit.Count, 1)
        self.metrics.add_metadata("fallback", f"{failed}->{next_target}")
        self.logger.warning(
            "target fallback",
            extra={"model": model, "failed": failed, "next": next_target, "error_type": type(error).__name__},
        )

    # --- Errors and metrics -------------------------------------------------------------------------------

    def reject(self, error: RequestError) -> Response:
        """``error`` as the route's response, recorded and logged."""
        self.record.error_type = type(error).__name__
        log = self.logger.error if error.status_code >= 500 else self.logger.warning
        log(
            "request failed" if error.status_code >= 500 else "request rejected",
            extra={"status": error.status_code, "error_type": type(error).__name__, "param": error.param},
        )
        http = error.to_http()
        return Response(status_code=http.status_code, headers=http.headers, body=http.body)

    def publish(self, status: int) -> None:
        """The request's metrics, once its response (``status``) is built."""
        record = self.record
        if record.route is None and record.error_type is None:
            return  # /health, /v1/models, /openapi.json: no inference, nothing worth a metric
        model = record.model if record.model in self.settings.routes else "unknown"
        elapsed_ms = (time.perf_counter() - record.started) * 1000.0
        response = record.response or {}
        add_completion_metrics(
            self.metrics,
            service=self.settings.service,
            model=model,
            latency_ms=elapsed_ms,
            usage=response.get("usage"),
            timings=response.get("timings"),
            features=record.features,
        )
        if record.invoke_s:
            self.metrics.add_metric(
                "RouterOverhead", MetricUnit.Milliseconds, elapsed_ms - record.invoke_s * 1000
            )
        if record.error_type is not None:
            record_error(
                namespace=self.settings.metrics_namespace,
                service=self.settings.service,
                model=model,
                error_type=record.error_type,
                status=status,
            )


def json_response(status: int, body: dict[str, Any]) -> Response[dict[str, Any]]:
    """A JSON response of ``body`` (kept a dict, which Powertools serializes once)."""
    return Response(status_code=status, content_type=JSON, body=body)
