"""The router: OpenAI-compatible HTTP routes (API Gateway HTTP API) in front of the inference aliases.

    router = RouterApp.from_env(routers=[agent_routes.router])   # another module's Powertools routes join
    handler = router.handler   # functions/router/app.py: Logger + Tracer + Metrics around the resolver

``snapllm local serve`` builds the same app with clients of local environments. docs/api.md has its routes,
limits and errors.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.router import Router
from aws_lambda_powertools.logging import correlation_paths
from botocore.config import Config

from snapllm.api_keys import authorizer_verdict
from snapllm.aws_auth import secret_api_key
from snapllm.errors import (
    REQUEST_ID_HEADER,
    HttpResponse,
    InvalidRequestError,
    RequestError,
    RouteNotFoundError,
    ServerError,
    request_id_or_new,
)
from snapllm.inference.client import (
    HttpInferenceClient,
    InferenceClient,
    LambdaInferenceClient,
    is_endpoint,
)
from snapllm.protocol.completions.objects import ModelList
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
from snapllm.protocol.http.routes import OPENAPI
from snapllm.protocol.requests import require_object, validation_error
from snapllm.router.gateway import JSON, Gateway
from snapllm.router.routes.completions import completion_routes
from snapllm.router.routes.model_routes import model_routes
from snapllm.router.routes.models import model_list_routes
from snapllm.router.settings import RouterSettings

# Requests that invoke nothing (health, models, OpenAPI) publish no metric; Powertools would warn each time.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)


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
        self.gateway = Gateway(
            settings, self.clients, logger=self.logger, metrics=self.metrics, tracer=self.tracer
        )
        for group in (completion_routes, model_routes, model_list_routes):
            self.resolver.include_router(group(self.gateway))
        self._register_app_routes()
        for router in routers:
            self.resolver.include_router(router)
        self.handler = self._instrumented(self.handle)

    @property
    def fallbacks(self) -> Mapping[tuple[str, str], int]:
        """Requests sent on to the next target, per (failed target, next target)."""
        return self.gateway.fallbacks

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
        record = self.gateway.begin()
        try:
            self._check_edge(event)
        except RequestError as refused:
            record.error_type = type(refused).__name__
            result = refused.to_http().to_lambda()
        else:
            result = _PREFLIGHT.to_lambda() if _is_preflight(event) else self.resolver.resolve(event, context)
        # OpenAI's header, which clients read as the request's id (the SDKs' ``_request_id``): API Gateway's
        # request id, the correlation id of this request's logs.
        headers = {**(result.get("headers") or {}), REQUEST_ID_HEADER: _request_id(event, context)}
        if record.ignored_fields:
            headers[IGNORED_FIELDS_HEADER] = ignored_fields_header(record.ignored_fields)
        result["headers"] = headers
        self.gateway.publish(result.get("statusCode", 500))
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

    def _register_app_routes(self) -> None:
        """The OpenAPI document and the error handlers of every route."""
        app = self.resolver
        reject = self.gateway.reject

        @app.get(OPENAPI, include_in_schema=False)
        def openapi_document() -> Response[str]:
            return Response(status_code=200, content_type=JSON, body=self.openapi_json)

        @app.exception_handler(RequestValidationError)
        def invalid(exc: RequestValidationError) -> Response:
            return reject(_validation_error(exc))

        @app.exception_handler(UnicodeDecodeError)
        def not_utf8(exc: UnicodeDecodeError) -> Response:
            return reject(InvalidRequestError("the request body is not valid UTF-8 JSON"))

        @app.exception_handler(RequestError)
        def rejected(exc: RequestError) -> Response:
            # Every error with a status: the router's own, the inference function's (rebuilt by the
            # client as the class it was raised as), and failed, throttled or timed-out invokes.
            return reject(exc)

        @app.not_found
        def not_found(exc: NotFoundError) -> Response:
            try:
                self.route_table.match(app.current_event.http_method, app.current_event.path)
            except RequestError as error:  # 404, or 405 with the path's methods
                return reject(error)
            return reject(RouteNotFoundError(f"no route for {app.current_event.http_method}"))

        @app.exception_handler(Exception)
        def unexpected(exc: Exception) -> Response:
            request_id = app.lambda_context.aws_request_id if app.lambda_context else None
            self.logger.exception("router failure")
            return reject(ServerError(f"the router failed (request id {request_id})"))

    def model_list(self) -> ModelList:
        return self.gateway.model_list()

    @functools.cached_property
    def route_table(self) -> RouteTable:
        """Every route the resolver serves, read from its OpenAPI document (built on first use: only
        requests that no route matched need it)."""
        table = RouteTable.from_openapi(json.loads(self.openapi_json))
        return RouteTable({**table.routes, OPENAPI: ["GET"]})

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
