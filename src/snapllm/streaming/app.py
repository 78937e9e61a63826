"""The streaming function's web app: an ASGI app that Lambda Web Adapter (LWA) runs behind a Function URL.

    runtime = InferenceRuntime.initialize()   # the same S3 -> memfd -> llama.cpp init as InferenceFunction
    app = create_app(runtime)                 # functions/stream/app.py; run.sh serves it on 127.0.0.1:$PORT

Its routes are the router's, streamed; the SnapStart hooks are two routes only LWA may call (docs/api.md).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from snapllm.api_keys import ApiKeyVerifier
from snapllm.api_keys.store import ApiKeyEnvironment
from snapllm.engine.types import Deadline, TokenDelta
from snapllm.errors import REQUEST_ID_HEADER, RequestError, ServerError, request_id_or_new
from snapllm.inference.runtime import InferenceRuntime
from snapllm.protocol.completions.objects import Health, ModelList
from snapllm.protocol.completions.sse import StreamEncoder
from snapllm.protocol.http.edge import (
    RouteTable,
    check_content_type,
    check_headers,
    decode_json,
    is_cors_preflight,
)
from snapllm.protocol.http.fields import IGNORED_FIELDS_HEADER, ignored_fields_header
from snapllm.protocol.http.routes import (
    CHAT_COMPLETIONS,
    COMPLETIONS,
    HEALTH,
    MODELS,
    RESPONSES,
    ROUTED_PATHS,
    model_path,
)
from snapllm.protocol.metrics import CompletionMetrics, request_features
from snapllm.protocol.requests import require_object
from snapllm.protocol.responses.responses_api import AnyRequest, inference_request
from snapllm.protocol.serving import ReasoningDelta, Required, StreamItem
from snapllm.streaming.settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_METRICS_NAMESPACE,
    DEFAULT_SERVICE,
    DEFAULT_TIMEOUT_S,
    StreamingEnvironment,
)

logger = logging.getLogger("snapllm.stream")

BEFORE_CHECKPOINT_PATH = "/_snapllm/snapstart/before-checkpoint"
AFTER_RESTORE_PATH = "/_snapllm/snapstart/after-restore"
# Headers LWA adds to every request it turns an invoke into; LWA's own hook calls carry neither.
INVOKE_HEADERS = ("x-amzn-request-context", "x-amzn-lambda-context")


HOOK_PATHS = frozenset({BEFORE_CHECKPOINT_PATH, AFTER_RESTORE_PATH})


def error_response(error: RequestError) -> Response:
    """A request error as a Starlette response (:meth:`~snapllm.errors.RequestError.to_http`)."""
    http = error.to_http()
    return Response(http.body, status_code=http.status_code, headers=http.headers)


def _deadline(request: Request, runtime: InferenceRuntime, timeout_s: float) -> Deadline:
    """The invoke's deadline from LWA's ``x-amzn-lambda-context`` header, less the engine's margin."""
    margin_s = runtime.settings.serving.deadline_margin_ms / 1000.0
    raw = request.headers.get("x-amzn-lambda-context")
    if raw:
        try:
            deadline_ms = float(json.loads(raw)["deadline"])
            return Deadline.after(deadline_ms / 1000.0 - time.time() - margin_s)
        except (ValueError, KeyError, TypeError):
            logger.warning("unreadable x-amzn-lambda-context header; using the configured timeout")
    return Deadline.after(timeout_s - margin_s)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has closed its connection (call it once the body is read: the next message
    is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def cancelled_on_disconnect[T](
    receive: Receive, deadline: Deadline, work: Callable[[], Awaitable[T]]
) -> T:
    """``work()``, while the client's connection is watched: a client that closes it cancels ``deadline``,
    and the engine stops at its next check (between two of a prompt's batches, between two tokens) rather
    than at the end of the prompt or of the answer, where the next request would wait for it."""

    async def watch() -> None:
        await _disconnected(receive)
        deadline.cancel()

    outcome: list[T] = []
    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            outcome.append(await work())
        except Exception as exc:  # raised below as it is, not inside the task group's ExceptionGroup
            failure = exc
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return outcome[0]


def _gone() -> Response:
    """The answer to a request whose client closed its connection: nobody reads it (as for a client that
    left while sending its body)."""
    logger.info("request stopped: the client closed its connection")
    return Response(status_code=400)


class EventStream(StreamingResponse):
    """Server-sent events whose deadline is cancelled as soon as the client goes away. Starlette notices a
    departure only between two events, and the first token's event waits for the whole prompt."""

    def __init__(self, content: AsyncIterator[bytes], *, deadline: Deadline) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.deadline = deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        respond = super().__call__
        await cancelled_on_disconnect(receive, self.deadline, lambda: respond(scope, receive, send))


def _request_id(request: Request) -> str:
    """The id of the invoke LWA turned into this request (its ``x-amzn-lambda-context``), else the
    Function URL's request id (``x-amzn-request-context``), else a new one (a request not from LWA)."""
    for header, key in (("x-amzn-lambda-context", "request_id"), ("x-amzn-request-context", "requestId")):
        try:
            found = json.loads(request.headers.get(header) or "{}").get(key)
        except (ValueError, AttributeError):
            continue
        if found:
            return request_id_or_new(found)
    return request_id_or_new(None)


async def _events(
    items: Iterator[StreamItem], encoder: StreamEncoder, metrics: CompletionMetrics, deadline: Deadline
) -> AsyncIterator[bytes]:
    """Pull tokens from the engine on a worker thread, one at a time, and encode them as SSE events.

    When the client goes away Starlette cancels this generator, and :class:`EventStream` cancels the
    deadline; the token or prompt batch being computed finishes, then the engine's iterator is closed
    (shielded from the cancellation) so its lock is released.
    """
    done = object()
    try:
        yield encoder.start()
        while True:
            item = await anyio.to_thread.run_sync(next, items, done)
            if item is done:
                return
            if isinstance(item, TokenDelta):
                if item.text or item.logprobs:  # a held token (HELD) has nothing to send
                    yield encoder.delta(item.text, item.logprobs)
            elif isinstance(item, ReasoningDelta):
                yield encoder.reasoning(item.text)
            else:
                metrics.succeeded(item)
                yield encoder.finish(item)
    except RequestError as exc:
        if deadline.cancelled:  # nobody reads the error: the client closed its connection
            logger.info("request stopped: the client closed its connection")
            return
        metrics.failed(exc, status=200)
        yield encoder.error(exc)
    except Exception:
        logger.exception("streaming generation failed")
        error = ServerError("generation failed; see the function's logs")
        metrics.failed(error, status=200)
        yield encoder.error(error)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(items.close)  # type: ignore[attr-defined]


Endpoint = Callable[[Request], Awaitable[Response]]


class StreamingApp:
    """The streaming function's ASGI app around one :class:`InferenceRuntime`.

    Requests are dispatched through a :class:`~snapllm.protocol.http.edge.RouteTable` rather than framework
    route patterns, so unknown paths and methods get the same 404 / 405 error bodies as the router's.
    """

    def __init__(
        self,
        runtime: InferenceRuntime,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        service: str = DEFAULT_SERVICE,
        metrics_namespace: str = DEFAULT_METRICS_NAMESPACE,
        api_keys: ApiKeyVerifier | None = None,
    ) -> None:
        self.runtime = runtime
        #: ApiAuth=KEY: the check of every request's key (None: keys are not checked).
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.service = service
        self.metrics_namespace = metrics_namespace
        self._endpoints: dict[tuple[str, str], Endpoint] = {
            ("POST", CHAT_COMPLETIONS): self.chat_completions,
            ("POST", COMPLETIONS): self.completions,
            ("POST", RESPONSES): self.responses,
            **{("POST", path): self.routed for path in ROUTED_PATHS},
            ("GET", MODELS): self.models,
            ("GET", model_path("{model}")): self.model,
            ("GET", HEALTH): self.health,
            ("POST", BEFORE_CHECKPOINT_PATH): self.before_checkpoint,
            ("POST", AFTER_RESTORE_PATH): self.after_restore,
        }
        routes: dict[str, list[str]] = {}
        for method, path in self._endpoints:
            routes.setdefault(path, []).append(method)
        self.route_table = RouteTable(routes)
        self._lifespan = Starlette()  # lifespan events only; every HTTP request goes to dispatch()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._lifespan(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await self.dispatch(request)
        response.headers[REQUEST_ID_HEADER] = _request_id(request)
        await response(scope, receive, send)

    async def dispatch(self, request: Request) -> Response:
        try:
            check_headers(request.headers.items())
            if is_cors_preflight(request.method, request.headers):
                return Response(status_code=204)  # the Function URL adds the CORS headers
            await self._check_api_key(request)
            # scope["path"], not request.url.path: URL parsing drops a decoded "\n" or "\t" from the path.
            path = self.route_table.match(request.method, request.scope["path"])
        except RequestError as exc:
            return error_response(exc)
        return await self._endpoints[(request.method, path)](request)

    async def _check_api_key(self, request: Request) -> None:
        """ApiAuth=KEY: refuse (401) a request without a valid key, before any other work. LWA's own
        requests (its readiness check and the SnapStart hooks, which no invoke carries) need none."""
        if self.api_keys is None:
            return
        path = request.scope["path"]
        if not self._from_outside(request) and (path == HEALTH or path in HOOK_PATHS):
            return
        # Repeated headers joined as API Gateway and Function URLs join them: no key has a comma.
        values = request.headers.getlist("authorization")
        await anyio.to_thread.run_sync(self.api_keys.verify, ",".join(values) if values else None)

    # --- OpenAI routes ----------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        return await self._complete(request, required="messages")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, required="prompt")

    async def responses(self, request: Request) -> Response:
        return await self._complete(request, required="input")

    async def routed(self, request: Request) -> Response:
        """A route the model answers without generating (tokens, counts, embeddings), as a direct invoke
        of it would."""
        route = request.scope["path"]
        try:
            check_content_type(request.headers.get("content-type"))
            raw = await request.body()
            deadline = _deadline(request, self.runtime, self.timeout_s).cancellable()
            answer = await cancelled_on_disconnect(
                request.receive,
                deadline,
                lambda: anyio.to_thread.run_sync(self._answer_routed, route, raw, deadline),
            )
        except ClientDisconnect:
            return Response(status_code=400)
        except RequestError as exc:
            logger.warning("request rejected", extra={"error_type": type(exc).__name__, "param": exc.param})
            return error_response(exc)
        except Exception:
            logger.exception("route failed", extra={"route": route})
            return error_response(ServerError("the request failed; see the function's logs"))
        return JSONResponse(answer)

    def _answer_routed(self, route: str, raw: bytes, deadline: Deadline) -> dict[str, Any]:
        body = require_object(decode_json(raw, max_bytes=self.max_body_bytes))
        return self.runtime.routes.answer(route, body, deadline=deadline)

    async def models(self, request: Request) -> Response:
        return JSONResponse(self._models().model_dump(mode="json"))

    async def model(self, request: Request) -> Response:
        try:
            card = self._models().card(request.scope["path"].removeprefix("/v1/models/"))
        except RequestError as exc:
            return error_response(exc)
        return JSONResponse(card.model_dump(mode="json"))

    def _models(self) -> ModelList:
        return ModelList.of([self.runtime.model_name], created=0, owned_by="snapllm")

    async def health(self, request: Request) -> Response:
        return JSONResponse(Health(status="ok", models=[self.runtime.model_name]).model_dump())

    async def _complete(self, request: Request, *, required: Required) -> Response:
        # The model dimension is "unknown" until the request is known to name this function's model.
        metrics = CompletionMetrics(namespace=self.metrics_namespace, service=self.service, model="unknown")
        try:
            parsed = await self._parse(request, required)
        except ClientDisconnect:
            # The client left while sending its body: nobody is there to read an answer or an error.
            return Response(status_code=400)
        except RequestError as exc:
            logger.warning("request rejected", extra={"error_type": type(exc).__name__, "param": exc.param})
            metrics.failed(exc)
            return error_response(exc)
        response = await self._serve(parsed, request, metrics)
        if parsed.ignored_fields:
            logger.warning("unknown request fields ignored", extra={"fields": list(parsed.ignored_fields)})
            response.headers[IGNORED_FIELDS_HEADER] = ignored_fields_header(parsed.ignored_fields)
        return response

    async def _serve(self, parsed: AnyRequest, request: Request, metrics: CompletionMetrics) -> Response:
        """The answer to a parsed request: its JSON, its stream, or the error that came before either."""
        serving = self.runtime.serving
        deadline = _deadline(request, self.runtime, self.timeout_s).cancellable()
        try:
            metrics.model = serving.model_name
            metrics.features = request_features(inference_request(parsed))
            if not parsed.stream:
                answer, generation = await cancelled_on_disconnect(
                    request.receive,
                    deadline,
                    lambda: anyio.to_thread.run_sync(lambda: serving.complete(parsed, deadline=deadline)),
                )
                if deadline.cancelled:
                    return _gone()
                metrics.succeeded(generation)
                return JSONResponse(answer)
            # Preparing (tokenizing, checking limits) happens here, so a request error is still a 4xx.
            items, encoder = await anyio.to_thread.run_sync(
                lambda: serving.open_stream(parsed, deadline=deadline)
            )
        except RequestError as exc:
            if deadline.cancelled:
                return _gone()
            logger.warning("request rejected", extra={"error_type": type(exc).__name__, "param": exc.param})
            metrics.failed(exc)
            return error_response(exc)
        except Exception:
            logger.exception("generation failed")
            error = ServerError("generation failed; see the function's logs")
            metrics.failed(error)
            return error_response(error)
        return EventStream(_events(items, encoder, metrics, deadline), deadline=deadline)

    async def _parse(self, request: Request, required: Required) -> AnyRequest:
        check_content_type(request.headers.get("content-type"))
        raw = await request.body()
        # Decoding and validating a body (its schemas' grammars included) is CPU work bounded per request,
        # but not free: it runs on a worker thread, so the event loop keeps serving every other stream.
        return await anyio.to_thread.run_sync(self._parse_body, raw, required)

    def _parse_body(self, raw: bytes, required: Required) -> AnyRequest:
        return self.runtime.serving.parse(decode_json(raw, max_bytes=self.max_body_bytes), required=required)

    # --- SnapStart hooks (called by LWA) ------------------------------------------------------------------

    @staticmethod
    def _from_outside(request: Request) -> bool:
        return any(name in request.headers for name in INVOKE_HEADERS)

    async def before_checkpoint(self, request: Request) -> Response:
        if self._from_outside(request):
            return Response(status_code=403)
        await anyio.to_thread.run_sync(functools.partial(self.runtime.before_snapshot, streams=True))
        return JSONResponse({"hook": "before-checkpoint", "environment_id": self.runtime.environment_id})

    async def after_restore(self, request: Request) -> Response:
        if self._from_outside(request):
            return Response(status_code=403)
        self.runtime.after_restore()
        return JSONResponse({"hook": "after-restore", "environment_id": self.runtime.environment_id})


def create_app(runtime: InferenceRuntime, **options: Any) -> StreamingApp:
    """The ASGI app for ``runtime``; ``options`` go to :class:`StreamingApp`, and those not given come
    from the environment (:class:`~snapllm.streaming.settings.StreamingEnvironment`)."""
    settings = StreamingEnvironment.from_env()
    options.setdefault("max_body_bytes", settings.max_body_bytes)
    options.setdefault("timeout_s", settings.stream_timeout_s)
    options.setdefault("service", settings.service)
    options.setdefault("metrics_namespace", settings.metrics_namespace)
    if "api_keys" not in options:
        options["api_keys"] = ApiKeyEnvironment.from_env().verifier()
    return StreamingApp(runtime, **options)
