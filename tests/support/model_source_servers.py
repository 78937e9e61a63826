"""Local endpoints for the ModelSource tests, all on 127.0.0.1 over real TCP.

- :class:`FileServer` serves files over HTTP or HTTPS (a self-signed certificate made per test session),
  honours ``Range: bytes=N-`` (or ignores it on request) and can end a body early or crawl;
- :class:`ResponseRecorder` plays CloudFormation's pre-signed response URL over the tests' one HTTP stub:
  it records every PUT and answers with queued statuses, drops the connection, never answers
  (``"stall"``), answers a byte at a time (``"trickle"``) or late (``"slow:SECONDS"``).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.http_stub import HttpStub, Reply, Request

_CHUNK = 256 * 1024
_RANGE = re.compile(r"bytes=(\d+)-")


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own authority: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "snapllm test server")])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, False, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "server.pem", directory / "server.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@dataclass
class Served:
    method: str
    path: str
    range: str | None


@dataclass
class Behaviour:
    """What the server does to the next GET bodies (set between requests by a test)."""

    #: One entry per coming GET: end its body after this many bytes (None: send it whole).
    drops: list[int | None] = field(default_factory=list)
    #: Answer Range requests with the whole file (200), as a server without range support does.
    ignore_range: bool = False
    #: Send bodies at this many bytes per second.
    rate: int | None = None


class _FileHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        server = self.server
        requested_range = self.headers.get("Range")
        server.requests.append(Served("GET", self.path, requested_range))
        path = server.files.get(self.path)
        if path is None:
            body = b"not found"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        size = path.stat().st_size
        match = _RANGE.fullmatch(requested_range or "")
        start = int(match.group(1)) if match and not server.behaviour.ignore_range else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(size - start))
        stat = path.stat()
        self.send_header("ETag", f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"')
        if not server.behaviour.ignore_range:
            self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        drops = server.behaviour.drops
        drop = drops.pop(0) if drops else None
        try:
            self._send(path, start, drop, server.behaviour.rate)
        except OSError:
            self.close_connection = True

    def _send(self, path: Path, start: int, drop: int | None, rate: int | None) -> None:
        sent = 0
        began = time.monotonic()
        with path.open("rb") as handle:
            handle.seek(start)
            while block := handle.read(_CHUNK if drop is None else min(_CHUNK, drop - sent)):
                self.wfile.write(block)
                sent += len(block)
                if rate:
                    time.sleep(max(0.0, began + sent / rate - time.monotonic()))
                if drop is not None and sent >= drop:
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return


class FileServer(ThreadingHTTPServer):
    """Serves ``files`` (URL path -> file) on 127.0.0.1; HTTPS when given a certificate and key."""

    daemon_threads = True

    def __init__(self, files: dict[str, Path], *, tls: tuple[Path, Path] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _FileHandler)
        self.files = files
        self.requests: list[Served] = []
        self.behaviour = Behaviour()
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*map(str, tls))
            self.socket = context.wrap_socket(self.socket, server_side=True)
            scheme = "https"
        self.base_url = f"{scheme}://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str) -> str:
        return self.base_url + path

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]  # names in lower case
    body: dict[str, Any]


class ResponseRecorder(HttpStub):
    """CloudFormation's side of a custom resource: ``url(name)`` is a response URL; ``responses`` holds
    what was PUT there (answered 200); ``answers`` queues other statuses (or ``"drop"``, ``"stall"``,
    ``"trickle"``, ``"slow:SECONDS"``) for the next PUTs; ``attempts`` counts the PUTs answered.
    ``arrivals`` is when each PUT arrived, ``given_up`` when the client closed each held one
    (``time.monotonic()``)."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.responses: list[Recorded] = []
        self.answers: list[int | str] = []
        self.attempts = 0

    @property
    def arrivals(self) -> list[float]:
        return [request.arrived for request in self.requests]

    def url(self, name: str) -> str:
        return f"{self.base_url}/cloudformation/{name}?X-Amz-Signature=secret"

    def _answer(self, request: Request) -> Reply:
        answer = self.answers.pop(0) if self.answers else 200
        if answer in ("drop", "stall", "trickle"):
            return Reply(action=answer)
        delay_s = 0.0
        if isinstance(answer, str) and answer.startswith("slow:"):
            delay_s, answer = float(answer.removeprefix("slow:")), 200
        self.attempts += 1
        if answer == 200:
            self.responses.append(Recorded(request.path, request.headers, request.json()))
        return Reply(status=int(answer), delay_s=delay_s)
