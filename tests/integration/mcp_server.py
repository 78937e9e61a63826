"""A real MCP server for the agent's tests: the ``mcp`` SDK's ``MCPServer`` (FastMCP in mcp 1.x) served over
streamable HTTP by uvicorn on 127.0.0.1, in a thread of the test process, so tests count calls on the
server's side::

    with ToolServer.start() as server:
        server.url                  # http://127.0.0.1:PORT/mcp
        server.calls["lookup"]      # how many times lookup ran
        server.keys["deploy"]       # the idempotency keys its calls carried

Tools: ``lookup`` (idempotent by annotation), ``broken`` (always answers isError), ``report`` (200 KB of
text), ``chart`` (a PNG image) and ``deploy`` (not idempotent: tests configure it as needing approval).
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
from mcp_types import ImageContent, ToolAnnotations

REPORT_BYTES = 200 * 1024
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
    def start(cls) -> Iterator[ToolServer]:
        logging.getLogger("mcp").setLevel(logging.WARNING)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = cls(url=f"http://127.0.0.1:{port}/mcp")
        app = _app(server).streamable_http_app(stateless_http=True, json_response=True)
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


def _app(server: ToolServer) -> MCPServer:
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

    return app
