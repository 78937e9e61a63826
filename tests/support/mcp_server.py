"""A real MCP server for the agent's tests: the ``mcp`` SDK's ``MCPServer`` (FastMCP in mcp 1.x) served over
streamable HTTP by uvicorn on 127.0.0.1, in a thread of the test process, so tests count calls on the
server's side::

    with ToolServer.start() as server:
        server.url                  # http://127.0.0.1:PORT/mcp
        server.calls["lookup"]      # how many times lookup ran
        server.keys["deploy"]       # the idempotency keys its calls carried

Tools: ``lookup`` (idempotent by annotation), ``broken`` (always answers isError), ``report`` (200 KB of
text), ``chart`` (a PNG image), ``deploy`` (not idempotent: tests configure it as needing approval),
``validate`` and ``audit`` (answer with a JSON-RPC error ``-32602`` instead of a result: a short one, and
one of 40 KB), and ``fact.get``, ``fact_get``, ``fact get`` (names that differ only in punctuation).
``start(extra_tools=[...])`` adds tools of the given names that answer their own name.

Beside ``/mcp``, paths that answer every POST with what a broken server might: ``/invalid/not-json`` (an
HTML page labelled JSON), ``/invalid/not-jsonrpc`` (JSON that is no JSON-RPC message),
``/invalid/wrong-shape`` (a JSON-RPC result of the wrong shape), and ``/refusing`` (a JSON-RPC error of
40 KB to every request).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ImageContent, ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

REPORT_BYTES = 200 * 1024
# Over the 32 KB the durable service takes for an error object.
LONG_ERROR_BYTES = 40 * 1024
PUNCTUATED_TOOLS = ("fact.get", "fact_get", "fact get")
INVALID_PATHS = ("/invalid/not-json", "/invalid/not-jsonrpc", "/invalid/wrong-shape")
# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
FACTS = {
    "snapstart": "SnapStart restores a snapshot of the initialized environment: cold starts skip the init.",
    "durable": "A durable function waiting on a callback is not running and is not billed.",
}


@dataclass
class ToolServer:
    url: str
    calls: Counter[str] = field(default_factory=Counter)
    keys: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    arguments: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    _server: Any = None
    _thread: threading.Thread | None = None

    def record(self, tool: str, ctx: Context, **arguments: Any) -> None:
        self.calls[tool] += 1
        self.arguments[tool].append(arguments)
        meta = ctx.request_context.meta or {}
        self.keys[tool].append(str(meta.get("snapllm/idempotency-key", "")))

    @classmethod
    @contextlib.contextmanager
    def start(cls, *, extra_tools: tuple[str, ...] = ()) -> Iterator[ToolServer]:
        logging.getLogger("mcp").setLevel(logging.WARNING)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = cls(url=f"http://127.0.0.1:{port}/mcp")
        app = _app(server, extra_tools).streamable_http_app(stateless_http=True, json_response=True)
        for path, answer in _BROKEN.items():
            app.router.routes.append(Route(path, answer, methods=["POST", "GET", "DELETE"]))
        uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=uv.run, name="mcp-test-server", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not uv.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.05)
        try:
            yield server
        finally:
            uv.should_exit = True
            thread.join(timeout=10)


def _app(server: ToolServer, extra_tools: tuple[str, ...]) -> MCPServer:
    app = MCPServer("snapllm-test-tools")

    @app.tool(annotations=ToolAnnotations(idempotentHint=True))
    def lookup(topic: str, ctx: Context) -> str:
        """Look up a short fact about a topic: snapstart or durable."""
        server.record("lookup", ctx, topic=topic)
        return FACTS.get(topic.strip().lower(), f"nothing is known about {topic!r}")

    @app.tool()
    def broken(reason: str, ctx: Context) -> str:
        """A tool that always fails."""
        server.record("broken", ctx)
        raise ToolError(f"the broken tool failed on purpose ({reason[:40]})")

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def report(section: str, ctx: Context) -> str:
        """Fetch the full report of a section (large)."""
        server.record("report", ctx)
        line = f"[{section[:20]}] Durable steps checkpoint their results; large results belong in S3.\n"
        return (line * (REPORT_BYTES // len(line) + 1))[:REPORT_BYTES]

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def chart(ctx: Context) -> ImageContent:
        """Draw the cost chart (an image)."""
        server.record("chart", ctx)
        return ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")

    @app.tool()
    def deploy(service: str, version: str, ctx: Context) -> str:
        """Deploy a version of a service (changes production)."""
        server.record("deploy", ctx, service=service, version=version)
        return f"deployed {service} {version}"

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def validate(ticket: str, ctx: Context) -> str:
        """Check that a ticket id is well formed."""
        server.record("validate", ctx, ticket=ticket)
        # A JSON-RPC error, not a result with isError: what a server sends for arguments it refuses.
        raise MCPError(code=INVALID_PARAMS, message=f"ticket must look like ABC-123, got {ticket[:20]!r}")

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def audit(scope: str, ctx: Context) -> str:
        """Audit the deployment of a scope."""
        server.record("audit", ctx, scope=scope)
        line = "audit refused: every finding is listed here. "
        raise MCPError(code=INVALID_PARAMS, message=(line * (LONG_ERROR_BYTES // len(line) + 1)))

    for name in (*PUNCTUATED_TOOLS, *extra_tools):
        app.tool(name=name, description=f"Look up a fact (the tool named {name!r}).")(_echo(server, name))

    return app


def _echo(server: ToolServer, name: str) -> Any:
    def answer(topic: str, ctx: Context) -> str:
        server.record(name, ctx, topic=topic)
        return f"{name}: {FACTS.get(topic.strip().lower(), 'nothing known')}"

    return answer


async def _not_json(request: Request) -> Response:
    return Response("<html><body>Sign in</body></html>", media_type="application/json")


async def _not_jsonrpc(request: Request) -> Response:
    return JSONResponse({"status": "ok", "service": "not an MCP server"})


async def _jsonrpc(request: Request, answer: dict[str, Any]) -> Response:
    message = await request.json()
    if not isinstance(message, dict) or "id" not in message:
        return Response(status_code=202)  # a notification
    return JSONResponse({"jsonrpc": "2.0", "id": message["id"], **answer})


async def _wrong_shape(request: Request) -> Response:
    return await _jsonrpc(request, {"result": {"tools": "none", "protocolVersion": 3}})


async def _refusing(request: Request) -> Response:
    line = "request refused: every reason is listed here. "
    message = line * (LONG_ERROR_BYTES // len(line) + 1)
    return await _jsonrpc(request, {"error": {"code": INVALID_PARAMS, "message": message}})


_BROKEN = {
    "/invalid/not-json": _not_json,
    "/invalid/not-jsonrpc": _not_jsonrpc,
    "/invalid/wrong-shape": _wrong_shape,
    "/refusing": _refusing,
}
