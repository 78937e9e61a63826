"""One HTTP server on 127.0.0.1 standing in for a remote endpoint: it records every request and answers from
a script, over real TCP.

``HttpStub(respond)`` answers each request with ``respond(request)``, unless a :class:`Reply` is queued in
``replies`` (the next request takes the first). A reply can also come late (``delay_s``), or not at all:
``drop`` ends the connection after reading the request, ``stall`` holds it until the client gives up,
``trickle`` sends one byte of a 200 every 0.5 s until the client gives up (``given_up`` records when).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    arrived: float  # time.monotonic()

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes | dict[str, Any] | list[Any] = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # What the connection does instead of answering.
    action: Literal["answer", "drop", "stall", "trickle"] = "answer"

    def encoded(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


class HttpStub(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a delayed reply may still be sleeping when the test ends

    def __init__(self, respond: Callable[[Request], Reply] = lambda request: Reply()) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.replies: list[Reply] = []
        self.requests: list[Request] = []
        self.given_up: list[float] = []
        self.stopping = threading.Event()
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> HttpStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpStub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.command, self.path, headers, body, time.monotonic())
        self.server.requests.append(request)
        reply = self.server.replies.pop(0) if self.server.replies else self.server.respond(request)
        time.sleep(reply.delay_s)
        if reply.action == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif reply.action in ("stall", "trickle"):
            self._hold(trickle=reply.action == "trickle")
        else:
            data = reply.encoded()
            self.send_response(reply.status)
            if not isinstance(reply.body, bytes):
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                self.wfile.write(data)

    def _hold(self, *, trickle: bool) -> None:
        """Keep the request waiting until the client closes the connection; record when it did."""
        self.close_connection = True
        pending = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" if trickle else b""
        while not self.server.stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.5)
            try:
                if readable and not self.connection.recv(1024):
                    break
                if pending:
                    self.connection.sendall(pending[:1])
                    pending = pending[1:]
            except OSError:
                break
        self.server.given_up.append(time.monotonic())
