"""An HTTP proxy in front of the local S3 endpoint that injects the failures real S3 sometimes returns.

moto answers correctly every time; to test the loader's handling of denied access, 5xx answers and bodies
cut short, requests pass through this proxy, which forwards them over real HTTP and applies a rule::

    def rule(request: ProxiedRequest) -> Fault | None:
        return Fault(status=503) if request.method == "GET" and request.count == 1 else None

    with FaultProxy(upstream="http://127.0.0.1:5000", rule=rule) as proxy:
        boto3.client("s3", endpoint_url=proxy.url)
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    headers: dict[str, str]
    count: int  # 1 for the first request with this method and Range header, 2 for its retry, ...


@dataclass(frozen=True)
class Fault:
    """``status``: answer with this error instead; ``truncate_after``: send the upstream headers but only
    this many body bytes, then drop the connection; ``etag``: rewrite the ETag header."""

    status: int | None = None
    code: str = "InternalError"
    truncate_after: int | None = None
    etag: str | None = None


Rule = Callable[[ProxiedRequest], Fault | None]


class FaultProxy:
    def __init__(self, upstream: str, rule: Rule) -> None:
        target = urlsplit(upstream)
        self._host, self._port = target.hostname, target.port
        self.rule = rule
        self.requests: list[ProxiedRequest] = []
        self._counts: Counter[tuple[str, str | None]] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    key = (self.command, self.headers.get("Range"))
                    proxy._counts[key] += 1
                    request = ProxiedRequest(self.command, self.path, dict(self.headers), proxy._counts[key])
                    proxy.requests.append(request)
                fault = proxy.rule(request)
                if fault is not None and fault.status is not None:
                    payload = (
                        f"<?xml version='1.0'?><Error><Code>{fault.code}</Code>"
                        f"<Message>injected</Message></Error>"
                    ).encode()
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection(proxy._host, proxy._port, timeout=30)
                upstream.request(self.command, self.path, body=body, headers=dict(self.headers))
                response = upstream.getresponse()
                data = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() in {"transfer-encoding", "connection"}:
                        continue
                    if name.lower() == "etag" and fault is not None and fault.etag is not None:
                        value = fault.etag
                    self.send_header(name, value)
                self.end_headers()
                if fault is not None and fault.truncate_after is not None:
                    self.wfile.write(data[: fault.truncate_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
