"""Fault injection for the local S3 endpoint: a real HTTP/TCP proxy on 127.0.0.1 that breaks responses.

    with FaultProxy(s3.endpoint_url, [parse_fault("reset@30MB")]) as proxy:
        boto3.client("s3", endpoint_url=proxy.url)

Fault specs (``reset@30MB``, ``stall@10MB:for=5s``, ``slow@1MB/s``, ``status=503:SlowDown:every=3``...)
are those of ``snapllm local invoke --s3-fault``: docs/testing.md ("Faults in the local S3") lists them.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from snapllm.errors import SnapllmError

_CHUNK = 1024 * 1024
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2}
_UNITS |= {"g": 1024**3, "gb": 1024**3, "gib": 1024**3}
_DEFAULT_CODES = {
    400: "BadRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    412: "PreconditionFailed",
    500: "InternalError",
    503: "SlowDown",
}
# Not forwarded: they describe one hop, and the proxy frames its own messages.
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "upgrade", "te"}


class FaultSpecError(SnapllmError):
    """A fault spec does not parse; the message says which part and what is accepted."""


class FaultProxyError(SnapllmError):
    """The proxy was pointed at an upstream that is not on this machine's loopback interface."""


class StreamFault(StrEnum):
    """What happens to a response body once ``after`` bytes of it have been sent."""

    RESET = "reset"
    CLOSE = "close"
    STALL = "stall"
    SLOW = "slow"


@dataclass(frozen=True)
class Fault:
    """What the proxy does to one response.

    ``status``: answer it with an S3 error document (``code``, by default the usual one for the status)
    instead of forwarding; ``etag``: rewrite the forwarded ETag header; ``stream``: after ``after`` body
    bytes, reset, close or stall the connection (``stall_s`` seconds, or until the proxy stops), or send
    the whole body at ``rate`` bytes per second.
    """

    status: int | None = None
    code: str | None = None
    etag: str | None = None
    stream: StreamFault | None = None
    after: int = 0
    stall_s: float | None = None
    rate: int | None = None

    @property
    def error_code(self) -> str:
        if self.code is not None:
            return self.code
        assert self.status is not None
        return _DEFAULT_CODES.get(self.status, "InternalError" if self.status >= 500 else "InvalidRequest")


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    headers: dict[str, str]
    count: int  # 1 for the first request with this method and Range header, 2 for its retry, ...
    number: int  # 1 for the first request with this method, 2 for the next, ...
    part: int  # 1 for the first distinct Range asked for with this method, 2 for the next, ...


Rule = Callable[[ProxiedRequest], Fault | None]


@dataclass(frozen=True)
class FaultSpec:
    """A parsed fault spec: a :class:`Fault` and which GET requests it applies to."""

    fault: Fault
    always: bool = False
    every: int | None = None

    def applies_to(self, request: ProxiedRequest) -> bool:
        """Whether ``request`` is a candidate (a ``once`` stream fault still has to claim its firing)."""
        if request.method != "GET":
            return False
        if self.always or self.fault.stream is not None:
            return True
        if self.every is not None:
            return request.count == 1 and (request.part - 1) % self.every == 0
        return request.number == 1

    def __str__(self) -> str:
        fault = self.fault
        if fault.status is not None:
            text = f"status={fault.status}:{fault.error_code}"
        elif fault.stream is StreamFault.SLOW:
            text = f"slow@{_size(fault.rate or 0)}/s"
        else:
            text = f"{fault.stream}@{_size(fault.after)}"
            if fault.stall_s is not None:
                text += f":for={fault.stall_s:g}s"
        if self.every is not None:
            return f"{text}:every={self.every}"
        return f"{text}:always" if self.always else text


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([a-z]*)$")
_STREAM = re.compile(r"^(reset|close|stall)@([0-9.]+[a-z]*)$")
_SLOW = re.compile(r"^slow@([0-9.]+[a-z]*)/s$")
_STATUS = re.compile(r"^status=(\d{3})$")
_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_SECONDS = re.compile(r"^(\d+(?:\.\d+)?)s?$")


def _size(count: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}"
    return f"{count}B"


def parse_size(text: str) -> int:
    """``30MB`` -> 31457280 (binary units). Raises :class:`FaultSpecError`."""
    match = _SIZE.match(text.strip().lower())
    if match is None or match.group(2) not in _UNITS:
        raise FaultSpecError(f"{text!r} is not a size: a number with B, KB, MB or GB (binary units)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_fault(text: str) -> FaultSpec:
    """Parse one fault spec (see the module docstring). Raises :class:`FaultSpecError`."""
    kind, *options = text.strip().split(":")
    lowered = kind.lower()
    if match := _STREAM.match(lowered):
        fault = Fault(stream=StreamFault(match.group(1)), after=parse_size(match.group(2)))
    elif match := _SLOW.match(lowered):
        rate = parse_size(match.group(1))
        if rate < 1:
            raise FaultSpecError(f"{text!r}: the rate must be at least 1 B/s")
        fault = Fault(stream=StreamFault.SLOW, rate=rate)
    elif match := _STATUS.match(lowered):
        status = int(match.group(1))
        if not 400 <= status <= 599:
            raise FaultSpecError(f"{text!r}: the status must be an error status (400-599)")
        fault = Fault(status=status)
    else:
        raise FaultSpecError(
            f"{text!r} is not a fault spec: expected reset@SIZE, close@SIZE, stall@SIZE, slow@SIZE/s or "
            "status=NNN, then options such as :always, :every=3, :for=5s or an S3 error code"
        )
    always, every = False, None
    for option in options:
        name, _, value = option.partition("=")
        if option in ("once", "always"):
            always = option == "always"
        elif name == "every" and value.isdigit() and int(value) >= 1 and fault.status is not None:
            every = int(value)
        elif name == "for" and fault.stream is StreamFault.STALL and (seconds := _SECONDS.match(value)):
            fault = replace(fault, stall_s=float(seconds.group(1)))
        elif fault.status is not None and _CODE.match(option) and option not in ("every", "for"):
            fault = replace(fault, code=option)
        else:
            raise FaultSpecError(
                f"{text!r}: option {option!r} is not once, always, every=K (status faults), for=Ns (stall) "
                "or an S3 error code (status faults)"
            )
    if every is not None and always:
        raise FaultSpecError(f"{text!r}: every=K and always exclude each other")
    if fault.status is not None:
        fault = replace(fault, code=fault.error_code)
    return FaultSpec(fault, always=always, every=every)


def _require_loopback(host: str) -> None:
    try:
        address = ipaddress.ip_address(socket.gethostbyname(host))
    except (OSError, ValueError) as exc:
        raise FaultProxyError(f"cannot resolve the proxy's upstream {host!r}: {exc}") from exc
    if not address.is_loopback:
        raise FaultProxyError(f"the fault proxy only fronts a loopback endpoint; {host!r} is {address}")


class _Server(ThreadingHTTPServer):
    """Tracks its connections, so that stopping can end them and join their threads."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.sockets: set[socket.socket] = set()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return ipaddress.ip_address(client_address[0]).is_loopback

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="snapllm-faults-conn",
        )
        with self.lock:
            self.sockets.add(request)
            self.threads = [t for t in self.threads if t.is_alive()]
            self.threads.append(thread)
        thread.start()

    def track(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.add(sock)
            if self.proxy.stopping:
                # Opened after stop() ended the others: end it as well.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def untrack(self, sock: socket.socket | None) -> None:
        with self.lock:
            self.sockets.discard(sock)  # type: ignore[arg-type]

    def close_socket(self, sock: socket.socket | None) -> None:
        # Untracked under the lock first, so stop() never shuts down a socket that is being closed here.
        self.untrack(sock)
        if sock is not None:
            sock.close()

    def shutdown_request(self, request: Any) -> None:
        self.untrack(request)
        super().shutdown_request(request)

    def end_connections(self) -> None:
        """Wake every thread blocked on a socket: a client's next request, an upstream read, a send."""
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def join(self) -> None:
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        proxy = self.server.proxy
        if proxy.stopping:
            self.close_connection = True
            return
        if self.headers.get("Transfer-Encoding"):
            self._error(501, "NotImplemented", "the fault proxy forwards Content-Length bodies only")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        request, fault, claim = proxy._admit(self.command, self.path, dict(self.headers))
        if fault is not None and fault.status is not None:
            self._error(fault.status, fault.error_code, "injected by the snapllm fault proxy")
            return
        try:
            self._forward(request, body, fault, claim)
        except (OSError, http.client.HTTPException):
            # The client went away (or the upstream did): nothing more can be sent on this connection.
            self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    def _error(self, status: int, code: str, message: str) -> None:
        payload = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{message}</Message></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(
        self, request: ProxiedRequest, body: bytes | None, fault: Fault | None, claim: Callable[[], bool]
    ) -> None:
        proxy = self.server.proxy
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
        try:
            upstream.connect()
            self.server.track(upstream.sock)
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            self.send_response_only(response.status, response.reason)
            announced = response.getheader("Content-Length")
            buffered = None
            if announced is None and self.command != "HEAD":
                buffered = response.read()
                announced = str(len(buffered))
            for name, value in response.getheaders():
                if name.lower() in _HOP_BY_HOP or name.lower() == "content-length":
                    continue
                if name.lower() == "etag" and fault is not None and fault.etag is not None:
                    value = fault.etag
                self.send_header(name, value)
            if announced is not None:
                self.send_header("Content-Length", announced)
            self.end_headers()
            if self.command == "HEAD" or response.status in (204, 304):
                return
            if buffered is not None:
                self.wfile.write(buffered)
                return
            self._send_body(response, fault if fault is not None and fault.stream else None, claim)
        finally:
            self.server.close_socket(upstream.sock)
            upstream.close()

    def _send_body(
        self, response: http.client.HTTPResponse, fault: Fault | None, claim: Callable[[], bool]
    ) -> None:
        stopping = self.server.proxy.wait_for_stop
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        sent = 0
        armed = fault is not None and fault.stream is not StreamFault.SLOW
        rate = None
        if fault is not None and fault.stream is StreamFault.SLOW and claim():
            self.server.proxy._record(fault)
            rate = fault.rate
        step = max(1, min(_CHUNK, rate // 20)) if rate else _CHUNK
        started = time.monotonic()
        while True:
            limit = step
            if armed:
                assert fault is not None
                if sent >= fault.after:
                    armed = False
                    if claim() and not self._cut(fault):
                        return
                else:
                    limit = min(limit, fault.after - sent)
            received = response.readinto(view[:limit])
            if not received:
                return
            self.connection.sendall(view[:received])
            sent += received
            if rate and stopping(max(0.0, started + sent / rate - time.monotonic())):
                self._close()
                return

    def _cut(self, fault: Fault) -> bool:
        """Do the stream fault; True if the rest of the body is to be sent after it (a stall that ended)."""
        self.server.proxy._record(fault)
        if fault.stream is StreamFault.RESET:
            # linger on with a zero timeout: close() sends RST and drops whatever was not yet sent.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._close()
            return False
        if fault.stream is StreamFault.CLOSE:
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self._close()
            return False
        if self.server.proxy.wait_for_stop(fault.stall_s):
            self._close()
            return False
        return True

    def _close(self) -> None:
        self.close_connection = True
        # rfile holds a reference that would defer the real close (and so the RST) until the handler ends.
        self.rfile.close()
        self.server.close_socket(self.connection)


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of a loopback endpoint, applying faults to what it forwards.

    ``faults`` are parsed specs (:func:`parse_fault`); ``rule`` decides per request for anything else.
    The first fault that applies wins: the rule's, then the specs' in order. ``requests`` lists every
    request seen and ``fired`` every fault done, as text, for tests and reports.
    """

    def __init__(self, upstream: str, faults: Iterable[FaultSpec] = (), *, rule: Rule | None = None) -> None:
        target = urlsplit(upstream)
        if target.hostname is None or target.port is None:
            raise FaultProxyError(f"the upstream {upstream!r} needs a host and a port")
        _require_loopback(target.hostname)
        self.upstream_host, self.upstream_port = target.hostname, target.port
        self.faults = list(faults)
        self.rule = rule
        self.requests: list[ProxiedRequest] = []
        self.fired: list[str] = []
        self._counts: Counter[tuple[str, str | None]] = Counter()
        self._numbers: Counter[str] = Counter()
        self._parts: dict[tuple[str, str | None], int] = {}
        self._claimed: set[int] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll interval: stop() waits up to one interval for the accept loop to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="snapllm-faults-serve"
        )
        self._started = False

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait_for_stop(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (None: until stopped); True if the proxy is stopping."""
        return self._stopping.wait(seconds)

    def start(self) -> FaultProxy:
        self._thread.start()
        self._started = True
        return self

    def stop(self) -> None:
        """End every connection (stalled ones included) and join every thread the proxy started."""
        self._stopping.set()
        if self._started:
            self._server.shutdown()
            self._thread.join()
        self._server.end_connections()
        self._server.server_close()
        self._server.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _admit(
        self, method: str, path: str, headers: dict[str, str]
    ) -> tuple[ProxiedRequest, Fault | None, Callable[[], bool]]:
        """Count the request and pick its fault; the callable claims a ``once`` fault's single firing."""
        with self._lock:
            key = (method, headers.get("Range"))
            self._counts[key] += 1
            self._numbers[method] += 1
            if key not in self._parts:
                self._parts[key] = sum(1 for m, _ in self._parts if m == method) + 1
            request = ProxiedRequest(
                method, path, headers, self._counts[key], self._numbers[method], self._parts[key]
            )
            self.requests.append(request)
            claimed = set(self._claimed)
        if self.rule is not None and (fault := self.rule(request)) is not None:
            if fault.status is not None or fault.etag is not None:
                self._record(fault)
            return request, fault, lambda: True
        for index, spec in enumerate(self.faults):
            if index in claimed or not spec.applies_to(request):
                continue
            if spec.fault.status is not None:
                self._record(spec.fault)
                return request, spec.fault, lambda: True
            return request, spec.fault, (lambda i=index, s=spec: s.always or self._claim(i))
        return request, None, lambda: True

    def _claim(self, index: int) -> bool:
        with self._lock:
            if index in self._claimed:
                return False
            self._claimed.add(index)
            return True

    def _record(self, fault: Fault) -> None:
        spec = fault.status is not None or fault.stream is not None
        with self._lock:
            self.fired.append(str(FaultSpec(fault)) if spec else f"etag={fault.etag}")
