"""The router: OpenAI-compatible HTTP routes (API Gateway HTTP API) in front of the inference aliases.

``functions/router/app.py`` is the thin Lambda handler around this module::

    router = RouterApp.from_env()           # routing table and limits from SNAPLLM_* variables
    handler = router.handler                # Logger + Tracer + Metrics around the resolver

Locally, ``snapllm local serve`` builds the same :class:`RouterApp` with clients that invoke restored local
environments instead of Lambda aliases. Another module's Powertools ``Router`` joins with one argument::

    router = RouterApp.from_env(routers=[agent_routes.router])

Every error is an OpenAI error body with a 4xx/5xx status; limits are checked before anything is invoked.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.router import Router
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from botocore.config import Config

from snapllm.api_keys import authorizer_verdict
from snapllm.aws_auth import secret_api_key
from snapllm.errors import (
    REQUEST_ID_HEADER,
    DeadlineExceededError,
    HttpResponse,
    InferenceNotReadyError,
    InferenceThrottledError,
    InvalidRequestError,
    RequestError,
    RouteNotFoundError,
    ServerError,
    UnknownModelError,
    UnsupportedParameterError,
    request_id_or_new,
)
from snapllm.inference.client import (
    HttpInferenceClient,
    InferenceClient,
    LambdaInferenceClient,
    is_endpoint,
)
from snapllm.protocol.completions.objects import (
    ChatCompletion,
    Completion,
    Health,
    ModelCard,
    ModelList,
    ResponseObject,
)
from snapllm.protocol.http import openapi
from snapllm.protocol.http.edge import (
    RouteTable,
    check_body_size,
    check_content_type,
    check_headers,
    check_path,
    decode_json,
    is_cors_preflight,
)
from snapllm.protocol.http.fields import IGNORED_FIELDS_HEADER, ignored_fields_header
from snapllm.protocol.limits import Limits
from snapllm.protocol.metrics import add_completion_metrics, record_error, request_features
from snapllm.protocol.model_routes.embeddings import EmbeddingList, EmbeddingsRequest
from snapllm.protocol.model_routes.model_routes import (
    CHAT_INPUT_TOKENS,
    DETOKENIZE,
    EMBEDDINGS,
    RERANK,
    RERANK_ALIAS,
    ROUTE_KEY,
    TOKENIZE,
    routed_event,
)
from snapllm.protocol.model_routes.rerank import RerankList, RerankRequest
from snapllm.protocol.model_routes.tokens import (
    ChatTokenCount,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    require_object,
    validation_error,
)
from snapllm.protocol.responses.responses_api import (
    AnyRequest,
    ResponsesRequest,
    inference_request,
    responses_fields,
)
from snapllm.router.settings import API_GATEWAY_LIMIT_S, RouterSettings

JSON = "application/json"
# Requests that invoke nothing (health, models, OpenAPI) publish no metric; Powertools would warn each time.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
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


def _object_body(raw: str) -> dict[str, Any]:
    return require_object(decode_json(raw))


# A CORS preflight answered with no content; API Gateway adds the CORS headers of the API's configuration.
_PREFLIGHT = HttpResponse(204, {}, "")


def _is_preflight(event: dict[str, Any]) -> bool:
    """Whether the event is a CORS preflight (:func:`~snapllm.protocol.http.edge.is_cors_preflight`)."""
    http = (event.get("requestContext") or {}).get("http") or {}
    headers = event.get("headers") if isinstance(event.get("headers"), dict) else {}
    return is_cors_preflight(http.get("method"), headers)


def _request_id(event: Any, context: Any) -> str:
    """API Gateway's id of the request (``requestContext.requestId``), else the invoke's, else a new one."""
    request = event.get("requestContext") if isinstance(event, dict) else None
    found = request.get("requestId") if isinstance(request, dict) else None
    return request_id_or_new(found or getattr(context, "aws_request_id", None))


@dataclass
class _Request:
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


class RouterApp:
    """The resolver, its routes and the Powertools utilities around it."""

    def __init__(
        self,
        settings: RouterSettings,
        clients: Mapping[str, InferenceClient],
        *,
        logger: Logger | None = None,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
        routers: Sequence[Router] = (),
    ) -> None:
        missing = sorted(set(settings.routes) - set(clients))
        if missing:
            raise ValueError(f"no inference client for {', '.join(missing)}")
        self.settings = settings
        self.clients = dict(clients)
        self.logger = logger or Logger(service=settings.service)
        self.metrics = metrics or Metrics(namespace=settings.metrics_namespace, service=settings.service)
        self.tracer = tracer or Tracer(service=settings.service)
        # Every JSON body is decoded by the edge's decoder (bounded nesting and numbers, no NaN) and must be
        # an object: Powertools' validation would otherwise take a one-element array for the object in it.
        self.resolver = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=_object_body)
        self.limits = Limits(max_tokens=settings.max_tokens, max_prompt_chars=settings.max_prompt_chars)
        self._created = int(time.time())
        self._request = _Request()
        #: Requests sent on to the next target, per (failed target, next target); also a metric.
        self.fallbacks: Counter[tuple[str, str]] = Counter()
        self._register_routes()
        for router in routers:
            self.resolver.include_router(router)
        self.handler = self._instrumented(self.handle)

    @classmethod
    def from_env(cls, *, routers: Sequence[Router] = ()) -> RouterApp:
        """Lambda clients for every route in ``SNAPLLM_ROUTES``, sharing one boto3 client.

        ``routers`` are other modules' Powertools routers (e.g. the agent's ``/v1/agent/runs``) to serve
        alongside the OpenAI routes, with the same validation, errors and telemetry.
        """
        settings = RouterSettings.from_env()
        lambda_client = boto3.client(
            "lambda",
            config=Config(
                connect_timeout=2,
                read_timeout=settings.invoke_timeout_s,
                # One attempt per call (botocore's max_attempts counts retries): LambdaInferenceClient
                # retries throttles itself, within the API Gateway budget.
                retries={"mode": "standard", "total_max_attempts": 1},
            ),
        )
        api_key = secret_api_key(settings.endpoint_secret_arn) if settings.endpoint_secret_arn else None
        clients: dict[str, InferenceClient] = {
            name: HttpInferenceClient(target, api_key=api_key, read_timeout_s=settings.invoke_timeout_s)
            if is_endpoint(target)
            else LambdaInferenceClient(
                target,
                lambda_client=lambda_client,
                read_timeout_s=settings.invoke_timeout_s,
                max_attempts=settings.invoke_max_attempts,
            )
            for name, target in settings.routes.items()
        }
        return cls(settings, clients, routers=routers)

    # --- Lambda entry point -----------------------------------------------------------------------------

    def _instrumented(self, handle: Callable[[dict[str, Any], Any], dict[str, Any]]) -> Callable[..., Any]:
        handle = self.metrics.log_metrics(capture_cold_start_metric=True)(handle)
        handle = self.tracer.capture_lambda_handler(capture_response=False)(handle)
        return self.logger.inject_lambda_context(
            correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True
        )(handle)

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway HTTP API (payload 2.0) event. Use :attr:`handler` on Lambda."""
        self._request = _Request()
        try:
            self._check_edge(event)
        except RequestError as refused:
            self._request.error_type = type(refused).__name__
            result = refused.to_http().to_lambda()
        else:
            result = _PREFLIGHT.to_lambda() if _is_preflight(event) else self.resolver.resolve(event, context)
        # OpenAI's header, which clients read as the request's id (the SDKs' ``_request_id``): API Gateway's
        # request id, the correlation id of this request's logs.
        headers = {**(result.get("headers") or {}), REQUEST_ID_HEADER: _request_id(event, context)}
        if self._request.ignored_fields:
            headers[IGNORED_FIELDS_HEADER] = ignored_fields_header(self._request.ignored_fields)
        result["headers"] = headers
        self._record(result.get("statusCode", 500))
        return result

    def _check_edge(self, event: Any) -> None:
        """Refuse, before Powertools sees it, what no route may get: an event that is not an HTTP API
        request, a path with control characters, oversized headers or body, a body that is not JSON."""
        request = event.get("requestContext") if isinstance(event, dict) else None
        http = request.get("http") if isinstance(request, dict) else None
        if not isinstance(http, dict) or not isinstance(http.get("method"), str):
            # A direct invoke (e.g. an inference event sent here by mistake) has no request to route.
            raise InvalidRequestError(
                "RouterFunction answers API Gateway HTTP API (payload format 2.0) events; "
                "invoke InferenceFunction directly for a completion event"
            )
        check_path(str(event.get("rawPath") or http.get("path") or ""))
        headers = event.get("headers")
        headers = headers if isinstance(headers, dict) else {}
        check_headers((str(name), str(value)) for name, value in headers.items())
        # ApiAuth=KEY: the authorizer's verdict before the body is read (a CORS preflight carries no key).
        if self.settings.api_auth == "KEY" and not _is_preflight(event):
            authorizer = request.get("authorizer") if isinstance(request, dict) else None
            authorizer_verdict(authorizer.get("lambda") if isinstance(authorizer, dict) else None)
        body = event.get("body")
        if not body or not isinstance(body, str):
            return
        # Checked before Powertools parses the body: a huge body is refused without being decoded.
        check_body_size(
            len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode()),
            max_bytes=self.settings.max_body_bytes,
        )
        # Powertools would read a form-encoded body (what `curl -d` sends by default) as form fields.
        check_content_type(headers.get("content-type"))

    # --- Routes -----------------------------------------------------------------------------------------

    def _register_routes(self) -> None:
        app = self.resolver

        @app.post(
            "/v1/chat/completions",
            summary="Create a chat completion",
            responses=openapi.completion_responses(ChatCompletion),
            tags=["OpenAI"],
        )
        def create_chat_completion(request: ChatCompletionRequest) -> Response[dict[str, Any]]:
            return self._complete(request, "/v1/chat/completions")

        @app.post(
            "/v1/completions",
            summary="Create a text completion",
            responses=openapi.completion_responses(Completion),
            tags=["OpenAI"],
        )
        def create_completion(request: CompletionRequest) -> Response[dict[str, Any]]:
            return self._complete(request, "/v1/completions")

        @app.post(
            "/v1/responses",
            summary="Create a response (stateless: nothing is stored)",
            responses=openapi.completion_responses(ResponseObject),
            tags=["OpenAI"],
        )
        def create_response(request: ResponsesRequest) -> Response[dict[str, Any]]:
            return self._complete(request, "/v1/responses")

        @app.post(
            EMBEDDINGS,
            summary="Create embeddings with an embedding model",
            responses=openapi.model_route_responses(EmbeddingList),
            tags=["OpenAI"],
        )
        def create_embeddings(request: EmbeddingsRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, EMBEDDINGS)

        @app.post(
            RERANK,
            summary="Rank documents by relevance to a query with a reranker (llama-server's, Jina's shape)",
            responses=openapi.model_route_responses(RerankList),
            tags=["Rerank"],
        )
        def rerank(request: RerankRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, RERANK)

        @app.post(
            RERANK_ALIAS,
            summary="Rank documents by relevance to a query (llama-server's other path of /v1/rerank)",
            responses=openapi.model_route_responses(RerankList),
            tags=["Rerank"],
        )
        def rerank_alias(request: RerankRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, RERANK_ALIAS)

        @app.post(
            CHAT_INPUT_TOKENS,
            summary="Count a chat completion request's prompt tokens without generating",
            responses=openapi.model_route_responses(ChatTokenCount),
            tags=["Tokens"],
        )
        def count_chat_tokens(request: ChatCompletionRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, CHAT_INPUT_TOKENS)

        @app.post(
            TOKENIZE,
            summary="Tokenize text with a model's vocabulary (llama-server's /tokenize)",
            responses=openapi.model_route_responses(TokenizeResponse),
            tags=["Tokens"],
        )
        def tokenize(request: TokenizeRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, TOKENIZE)

        @app.post(
            DETOKENIZE,
            summary="Turn token ids back into text (llama-server's /detokenize)",
            responses=openapi.model_route_responses(DetokenizeResponse),
            tags=["Tokens"],
        )
        def detokenize(request: DetokenizeRequest) -> Response[dict[str, Any]]:
            return self._route_to_model(request, DETOKENIZE)

        @app.get(
            "/v1/models",
            summary="List the models this deployment routes to",
            responses=openapi.simple_responses(ModelList),
            tags=["OpenAI"],
        )
        def list_models() -> Response[dict[str, Any]]:
            return self._json(200, self.model_list().model_dump(mode="json"))

        @app.get(
            "/v1/models/<model>",
            summary="Retrieve a model this deployment routes to",
            responses=openapi.lookup_responses(ModelCard, "No such model (code model_not_found)."),
            tags=["OpenAI"],
        )
        def retrieve_model(model: str) -> Response[dict[str, Any]]:
            return self._json(200, self.model_list().card(model).model_dump(mode="json"))

        @app.get("/health", summary="Liveness", responses=openapi.simple_responses(Health))
        def health() -> Response[dict[str, Any]]:
            return self._json(200, Health(status="ok", models=sorted(self.settings.routes)).model_dump())

        @app.get("/openapi.json", include_in_schema=False)
        def openapi_document() -> Response[str]:
            return Response(status_code=200, content_type=JSON, body=self.openapi_json)

        @app.exception_handler(RequestValidationError)
        def invalid(exc: RequestValidationError) -> Response:
            return self._reject(self._validation_error(exc))

        @app.exception_handler(UnicodeDecodeError)
        def not_utf8(exc: UnicodeDecodeError) -> Response:
            return self._reject(InvalidRequestError("the request body is not valid UTF-8 JSON"))

        @app.exception_handler(RequestError)
        def rejected(exc: RequestError) -> Response:
            # Every error with a status: the router's own, the inference function's (rebuilt by the
            # client as the class it was raised as), and failed, throttled or timed-out invokes.
            return self._reject(exc)

        @app.not_found
        def not_found(exc: NotFoundError) -> Response:
            try:
                self.route_table.match(app.current_event.http_method, app.current_event.path)
            except RequestError as error:  # 404, or 405 with the path's methods
                return self._reject(error)
            return self._reject(RouteNotFoundError(f"no route for {app.current_event.http_method}"))

        @app.exception_handler(Exception)
        def unexpected(exc: Exception) -> Response:
            request_id = app.lambda_context.aws_request_id if app.lambda_context else None
            self.logger.exception("router failure")
            return self._reject(ServerError(f"the router failed (request id {request_id})"))

    def model_list(self) -> ModelList:
        return ModelList.of(self.settings.routes, created=self._created, owned_by=self.settings.owned_by)

    @functools.cached_property
    def route_table(self) -> RouteTable:
        """Every route the resolver serves, read from its OpenAPI document (built on first use: only
        requests that no route matched need it)."""
        table = RouteTable.from_openapi(json.loads(self.openapi_json))
        return RouteTable({**table.routes, "/openapi.json": ["GET"]})

    @functools.cached_property
    def openapi_json(self) -> str:
        """The OpenAPI document of every route, built on first use."""
        document = json.loads(
            self.resolver.get_openapi_json_schema(
                title="snapllm",
                version="0.1.0",
                summary="OpenAI-compatible completions from small GGUF models on AWS Lambda",
            )
        )
        return json.dumps(openapi.without_validation_errors(document), indent=2)

    # --- Completions ------------------------------------------------------------------------------------

    def _complete(self, request: AnyRequest, route: str) -> Response:
        state = self._request
        state.route = route
        state.features = request_features(inference_request(request))
        state.ignored_fields = request.ignored_fields
        if request.ignored_fields:
            self.logger.warning(
                "unknown request fields ignored", extra={"fields": list(request.ignored_fields)}
            )
        model = self.settings.resolve_model(request.model)
        state.model = model or request.model
        self.tracer.put_annotation("route", route)
        self.tracer.put_annotation("model", state.model or "none")
        self.logger.append_keys(route=route, model=state.model)
        if model is None:
            raise UnknownModelError(
                f"the model {request.model!r} does not exist; available: "
                f"{', '.join(sorted(self.settings.routes))}",
                param="model",
            )
        self._check_limits(request)
        # The request goes on as the client sent it (model included): the function checks it serves it.
        payload = request.model_dump(mode="json", exclude_unset=True)
        if self.settings.log_prompts:
            self.logger.info("prompt", extra={"request": payload})
        invoked = time.perf_counter()
        try:
            body = self._invoke(model, payload, self._deadline())
        except DeadlineExceededError as exc:
            raise DeadlineExceededError(f"{exc.message}; {STREAMING_ADVICE}") from exc
        finally:
            state.invoke_s = time.perf_counter() - invoked
        state.response = body
        self.logger.info(
            "completion",
            extra={
                "usage": body.get("usage"),
                "timings": body.get("timings"),
                "finish_reason": (body.get("choices") or [{}])[0].get("finish_reason", body.get("status")),
                "invoke_ms": round(state.invoke_s * 1000, 2),
            },
        )
        return self._json(200, body)

    def _route_to_model(self, request: RoutedRequest, route: str) -> Response:
        """Invoke the model ``request`` names (or the default one) with a routed event of ``route``. No
        fallback: another model's tokens or vectors are not this one's."""
        state = self._request
        state.route = route
        model = self.settings.resolve_model(request.model)
        state.model = model or request.model
        self.tracer.put_annotation("route", route)
        self.tracer.put_annotation("model", state.model or "none")
        self.logger.append_keys(route=route, model=state.model)
        if model is None:
            raise UnknownModelError(
                f"the model {request.model!r} does not exist; available: "
                f"{', '.join(sorted(self.settings.routes))}",
                param="model",
            )
        if isinstance(request, ChatCompletionRequest):
            self.limits.check(request)  # what the completion would be refused for, before invoking
        payload = routed_event(route, request.model_dump(mode="json", exclude_unset=True))
        invoked = time.perf_counter()
        try:
            body = self._invoke(model, payload, self._deadline())
        finally:
            state.invoke_s = time.perf_counter() - invoked
        state.response = body
        return self._json(200, body)

    def _deadline(self) -> float:
        """The route's deadline (Unix epoch seconds): the invoke timeout after the request arrived, within
        API Gateway's 30 s. The model stops its work by then, less its margin (a prompt's evaluation and a
        rerank's documents included), and answers with what it has or with a ``DeadlineExceededError``."""
        return self._request.received + self.settings.invoke_timeout_s

    def _invoke(self, model: str, payload: dict[str, Any], deadline: float) -> dict[str, Any]:
        """The model's target, then each of its fallbacks while one is throttled or down and time is left.
        A fallback gets the request as its own model's; a routed event has no fallback."""
        targets = self.settings.targets(model) if ROUTE_KEY not in payload else (model,)
        for index, target in enumerate(targets):
            try:
                with self.tracer.provider.in_subsegment("## invoke inference") as subsegment:
                    subsegment.put_annotation("model", target)
                    sent = payload if target == model else {**payload, "model": target}
                    return self.clients[target].invoke(sent, deadline=deadline)
            except FALLBACK_ERRORS as exc:
                if index + 1 == len(targets) or time.time() >= deadline:
                    raise
                self._count_fallback(model, target, targets[index + 1], exc)
        raise AssertionError("unreachable")

    def _count_fallback(self, model: str, failed: str, next_target: str, error: Exception) -> None:
        self.fallbacks[(failed, next_target)] += 1
        self.metrics.add_metric("TargetFallback", MetricUnit.Count, 1)
        self.metrics.add_metadata("fallback", f"{failed}->{next_target}")
        self.logger.warning(
            "target fallback",
            extra={"model": model, "failed": failed, "next": next_target, "error_type": type(error).__name__},
        )

    def _check_limits(self, request: AnyRequest) -> None:
        if request.stream:
            raise UnsupportedParameterError(STREAMING_HINT, param="stream")
        with responses_fields(request):
            self.limits.check(inference_request(request))

    # --- Errors -----------------------------------------------------------------------------------------

    @staticmethod
    def _validation_error(exc: RequestValidationError) -> RequestError:
        """Powertools' validation errors in the shared contract's words (the same as a direct invoke's)."""
        errors = exc.errors()
        if not errors:
            return InvalidRequestError("the request is invalid")
        first = errors[0]
        if first.get("type") == "json_invalid":
            detail = (first.get("ctx") or {}).get("error", "JSON decode error")
            return InvalidRequestError(f"the request body is not valid JSON: {detail}")
        location = [str(part) for part in first.get("loc", ())]
        if location[:1] in (["header"], ["query"], ["path"]):
            message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            return InvalidRequestError(f"{location[0]} {'.'.join(location[1:])}: {message}")
        if location == ["body"] and first.get("type") == "missing":
            return InvalidRequestError("the request needs a JSON body")
        return validation_error(errors)

    def _reject(self, error: RequestError) -> Response:
        self._request.error_type = type(error).__name__
        log = self.logger.error if error.status_code >= 500 else self.logger.warning
        log(
            "request failed" if error.status_code >= 500 else "request rejected",
            extra={"status": error.status_code, "error_type": type(error).__name__, "param": error.param},
        )
        http = error.to_http()
        return Response(status_code=http.status_code, headers=http.headers, body=http.body)

    @staticmethod
    def _json(status: int, body: dict[str, Any]) -> Response[dict[str, Any]]:
        # The body stays a dict so Powertools' response validation checks it against the route's type.
        return Response(status_code=status, content_type=JSON, body=body)

    # --- Metrics ----------------------------------------------------------------------------------------

    def _record(self, status: int) -> None:
        state = self._request
        if state.route is None and state.error_type is None:
            return  # /health, /v1/models, /openapi.json: no inference, nothing worth a metric
        model = state.model if state.model in self.settings.routes else "unknown"
        elapsed_ms = (time.perf_counter() - state.started) * 1000.0
        metrics = self.metrics
        response = state.response or {}
        add_completion_metrics(
            metrics,
            service=self.settings.service,
            model=model,
            latency_ms=elapsed_ms,
            usage=response.get("usage"),
            timings=response.get("timings"),
            features=state.features,
        )
        if state.invoke_s:
            metrics.add_metric("RouterOverhead", MetricUnit.Milliseconds, elapsed_ms - state.invoke_s * 1000)
        if state.error_type is not None:
            record_error(
                namespace=self.settings.metrics_namespace,
                service=self.settings.service,
                model=model,
                error_type=state.error_type,
                status=status,
            )
