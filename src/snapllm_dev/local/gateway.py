"""``snapllm local serve``'s front door: the deployed HTTP surface on 127.0.0.1, without Docker or AWS.

    with LocalStack.start(sam.load(Path("template.yaml"))) as stack:
        serve(stack, listen(3000))   # http://127.0.0.1:3000/v1 for any OpenAI client

It plays API Gateway's HTTP API (in front of the router) and the streaming Function URL (in front of the
web-adapter app) on one port; docs/testing.md ("The local stack") says how.
"""

from __future__ import annotations

import base64
import json
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from snapllm.authorizer import KeyAuthorizer
from snapllm.errors import REQUEST_ID_HEADER, RequestError, request_id_or_new
from snapllm.protocol.http.edge import check_body_size, check_headers, decode_json
from snapllm.protocol.http.routes import COMPLETION_PATHS
from snapllm.router.events import http_api_event
from snapllm.streaming.app import HOOK_PATHS, error_response
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.cors import is_preflight
from snapllm_dev.local.stack import LocalStack

STREAMING_PATHS = frozenset(COMPLETION_PATHS)
# What API Gateway answers itself when a route's authorizer finds no identity source (no Authorization).
NO_IDENTITY = (401, b'{"message":"Unauthorized"}')
# API Gateway HTTP APIs refuse bodies over 10 MB before any function runs.
API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
_HOP_BY_HOP = frozenset({"host", "content-length", "connection", "transfer-encoding", "keep-alive"})


class LocalGateway:
    """The ASGI app of ``snapllm local serve``: API Gateway + router, or Function URL + LWA for streams."""

    def __init__(self, stack: LocalStack, *, streaming: bool = True) -> None:
        self.router = stack.router
        self.function = stack.router_function
        # ApiAuth=KEY: the HTTP API's authorizer, played here; streams go to the app, which checks its own.
        self._authorizer = KeyAuthorizer(stack.api_keys) if stack.api_keys is not None else None
        # One Lambda environment answers one request at a time; the resolver keeps per-request state.
        self._lock = threading.Lock()
        self._cors = stack.cors
        stream = stack.stream if streaming else None
        self._http = (
            httpx.AsyncClient(
                base_url=stream.url, transport=stream.async_transport(), timeout=httpx.Timeout(None)
            )
            if stream
            else None
        )
        self.app = Starlette()  # lifespan only: every HTTP request goes to endpoint()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # No Starlette routing: a route pattern would answer some paths (e.g. with an encoded newline)
        # itself, in plain text, where API Gateway passes every path to the router.
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = await self.endpoint(Request(scope, receive))
        # The router and the streaming app name their answers; what the gateway answers itself gets an id.
        if REQUEST_ID_HEADER not in response.headers:
            response.headers[REQUEST_ID_HEADER] = request_id_or_new(None)
        await response(scope, receive, send)

    def invoke_router(self, event: dict[str, Any]) -> dict[str, Any]:
        # API Gateway gives an integration 30 s.
        context = LocalContext.create(self.function.name, timeout_s=30, memory_mb=self.function.memory_mb)
        request = event.get("requestContext")
        request_id = request.get("requestId") if isinstance(request, dict) else None
        if isinstance(request_id, str) and request_id:
            context.aws_request_id = request_id  # as on Lambda, the log's request id is API Gateway's
        with self._lock:
            return self.router.handler(event, context)

    async def endpoint(self, request: Request) -> Response:
        try:
            # What API Gateway refuses itself, before any function runs.
            check_headers(request.headers.items())
            body = await request.body()
            check_body_size(len(body), max_bytes=API_GATEWAY_MAX_BODY_BYTES)
        except RequestError as error:
            return error_response(error)
        except ClientDisconnect:
            return Response(status_code=400)  # the client left mid-upload: nobody reads the answer
        # The path as the client sent it (decoded): request.url.path would drop a decoded "\n" or "\t", as
        # URL parsing does, and serve "/v1/chat/completions%0A" as if it were "/v1/chat/completions".
        path = request.scope["path"]
        if path in HOOK_PATHS:
            return Response(status_code=403)  # as LWA: hook paths are not reachable from outside
        if self._http is not None and request.method == "POST" and path in STREAMING_PATHS and _streams(body):
            return await self._forward(request, body)
        event = http_api_event(
            request.method,
            path,
            body=body,
            headers=request.headers.items(),
            query=request.url.query,
            source_ip=request.client.host if request.client else "127.0.0.1",
        )
        # With CORS the template's OPTIONS route has no authorizer: a preflight carries no key.
        unauthenticated = request.method == "OPTIONS" and self._cors.options_unauthenticated
        if self._authorizer is not None and not unauthenticated:
            authorization = event["headers"].get("authorization")  # repeated headers comma-joined
            if not authorization:
                status, content = NO_IDENTITY
                return Response(content, status_code=status, media_type="application/json")
            verdict = await anyio.to_thread.run_sync(self._authorizer.handle, {"headers": event["headers"]})
            event["requestContext"]["authorizer"] = {"lambda": verdict["context"]}
        result = await anyio.to_thread.run_sync(self.invoke_router, event)
        response = _http_response(result)
        if self._cors.http_api is not None:
            preflight = is_preflight(request.method, request.headers)
            self._cors.http_api.apply(request.headers, response.headers, preflight=preflight)
        return response

    async def _forward(self, request: Request, body: bytes) -> Response:
        assert self._http is not None
        # Every value of a repeated header goes on (a repeated Authorization must be refused, not collapsed),
        # as the bytes received: a value need not be ASCII.
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1") not in _HOP_BY_HOP]
        # LWA marks requests that came through an invoke; the app refuses its hooks to such requests.
        context = json.dumps({"http": {"method": "POST", "path": request.url.path}})
        headers.append((b"x-amzn-request-context", context.encode()))
        upstream = self._http.build_request("POST", request.url.path, content=body, headers=headers)
        response = await self._http.send(upstream, stream=True)
        passed = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self._cors.function_url is not None:
            self._cors.function_url.apply(request.headers, passed, preflight=False)
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=passed,
            background=BackgroundTask(response.aclose),
        )


def _streams(body: bytes) -> bool:
    try:
        parsed = decode_json(body)
    except RequestError:
        return False  # the router answers what the body is wrong with
    return isinstance(parsed, dict) and parsed.get("stream") is True


def _http_response(result: Mapping[str, Any]) -> Response:
    raw = result.get("body") or ""
    content = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
    response = Response(content=content, status_code=int(result.get("statusCode", 200)))
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    for cookie in result.get("cookies") or []:
        response.headers.append("set-cookie", cookie)
    return response


def listen(port: int, host: str = "127.0.0.1") -> socket.socket:
    """The socket :func:`serve` takes, bound before the stack starts: a port in use fails at once (OSError),
    not after the model has loaded."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # as uvicorn binds: TIME_WAIT is no obstacle
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(stack: LocalStack, sock: socket.socket) -> None:
    """Serve on ``sock`` (:func:`listen`) until interrupted (Ctrl-C / SIGTERM)."""
    host, port = sock.getsockname()[:2]
    gateway = LocalGateway(stack)
    others = [
        f"{name!r} -> {url}" for name, url in stack.router.settings.routes.items() if name != stack.model
    ]
    also = f", and {', '.join(others)}" if others else ""
    print(
        f"snapllm: serving model {stack.model!r}{also} on http://{host}:{port}/v1 "
        f"(streaming {'on' if stack.stream else 'off'}); Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(gateway, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
