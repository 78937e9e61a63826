"""A model file behind an ``https://`` URL, read as one stream that survives dropped connections.

    with HTTPSource("https://huggingface.co/org/repo/resolve/main/model.gguf") as source:
        while n := source.readinto(view):   # 0 at the end of the file
            ...

How it resumes and what it refuses: docs/deploy.md. It speaks plain http too, for the tests' fault proxy.
"""

from __future__ import annotations

import http.client
import logging
import re
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from snapllm.errors import (
    ModelCopyInputError,
    ModelCopyTimeoutError,
    ModelSourceDownloadError,
    ModelSourceHTTPError,
    ModelSourceResumeError,
)
from snapllm.retry import backoff_s

logger = logging.getLogger("snapllm.deploy")

USER_AGENT = "snapllm-model-source"
# Answers that a later attempt may not get: timeouts, throttling and server errors.
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_MAX_BACKOFF_S = 30.0
_READ_SIZE = 1024 * 1024


@dataclass(frozen=True)
class SourceSettings:
    """How the source waits and retries."""

    connect_timeout_s: float = 10.0
    #: Longest a read may wait for a byte before the connection counts as stalled and is resumed.
    read_timeout_s: float = 60.0
    #: Failures in a row, without a new byte in between, before the read gives up.
    max_attempts: int = 5
    #: The backoff's base (snapllm.retry.backoff_s): it doubles with each failure in a row, up to 30 s.
    backoff_s: float = 1.0


def redact(url: str) -> str:
    """``url`` without credentials or query string (signed CDN redirects carry secrets there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: the host alone
        port = None
    if port is not None:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries user information (``user:password@`` before its host)."""
    return "@" in urlsplit(url).netloc


CREDENTIALS_REFUSED = (
    "must not carry a user name or password: CloudFormation shows the URL in plain text. Use a URL "
    "that needs none (a pre-signed URL expires), or upload the file with `snapllm model push`"
)


class _NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but never from https to anything else."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if urlsplit(req.full_url).scheme == "https" and urlsplit(newurl).scheme != "https":
            raise ModelSourceHTTPError(
                f"{redact(req.full_url)} redirects to {redact(newurl)}, which is not https; refused",
                status=code,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class HTTPSource:
    """One file read from ``url`` front to back; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        settings: SourceSettings | None = None,
        ssl_context: ssl.SSLContext | None = None,
        deadline: float | None = None,
    ) -> None:
        if has_credentials(url):
            raise ModelCopyInputError(f"{redact(url)}: the URL {CREDENTIALS_REFUSED}")
        self.url = url
        self.settings = settings or SourceSettings()
        self.deadline = deadline
        self.size: int | None = None  # from the first answer's Content-Length (or a Content-Range)
        self.offset = 0
        self.resumes = 0  # reconnects that continued with a Range request
        self.retries = 0  # failed attempts, in all
        self._failures = 0  # ... in a row, without a new byte
        self._validator: str | None = None
        self._response: http.client.HTTPResponse | None = None
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=ssl_context or ssl.create_default_context()), _NoDowngrade()
        )

    @property
    def display_url(self) -> str:
        return redact(self.url)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def open(self) -> Self:
        """Connect now (the first :meth:`readinto` would), so that ``size`` is known before reading."""
        while self._response is None:
            self._connect()
        return self

    def readinto(self, view: memoryview) -> int:
        """Read up to ``len(view)`` bytes into ``view``; 0 only at the end of the file."""
        while True:
            if self._response is None:
                self._connect()
                continue
            self._set_read_timeout()
            try:
                # read1: at most one read from the socket, so every byte that arrived before a failure
                # is counted (a buffered readinto would lose what it had when the connection breaks).
                data = self._response.read1(min(len(view), _READ_SIZE))
            except (OSError, http.client.HTTPException) as exc:
                self._failed(f"the connection failed after {self.offset} bytes: {exc!r}")
                continue
            received = len(data)
            if received:
                view[:received] = data
                self.offset += received
                self._failures = 0
                return received
            if self.size is None or self.offset >= self.size:
                self.close()
                return 0
            self._failed(f"the connection closed after {self.offset} of {self.size} bytes")

    # --- Connections ------------------------------------------------------------------------------------

    def _connect(self) -> None:
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if self.offset:
            headers["Range"] = f"bytes={self.offset}-"
            if self._validator is not None:
                headers["If-Range"] = self._validator
        request = urllib.request.Request(self.url, headers=headers)
        try:
            response = self._opener.open(request, timeout=self._timeout(self.settings.connect_timeout_s))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code not in RETRYABLE_STATUS:
                raise ModelSourceHTTPError(
                    f"{self.display_url} answered {exc.code} {exc.reason}", status=exc.code
                ) from None
            self._failed(f"{self.display_url} answered {exc.code} {exc.reason}", _retry_after(exc.headers))
            return
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            self._failed(f"cannot connect to {self.display_url}: {exc}")
            return
        try:
            self._accept(response)
        except BaseException:
            response.close()
            raise
        self._response = response

    def _accept(self, response: http.client.HTTPResponse) -> None:
        encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise ModelSourceHTTPError(
                f"{self.display_url} sent the file with Content-Encoding {encoding}, not as it is",
                status=response.status,
            )
        if not self.offset:
            if response.status != 200:
                raise ModelSourceHTTPError(
                    f"{self.display_url} answered {response.status} to a plain GET", status=response.status
                )
            length = response.headers.get("Content-Length")
            self.size = int(length) if length and length.isdigit() else None
            etag = response.headers.get("ETag")
            strong = etag if etag and not etag.startswith("W/") else None
            self._validator = strong or response.headers.get("Last-Modified")
            return
        if response.status != 206:
            raise ModelSourceResumeError(
                f"the connection to {self.display_url} dropped after {self.offset} bytes and the server "
                f"answered the request for the rest with {response.status} instead of 206: it does not "
                "support Range requests, or the file changed; the copy cannot resume"
            )
        match = _CONTENT_RANGE.fullmatch((response.headers.get("Content-Range") or "").strip())
        start = int(match.group(1)) if match else None
        total = int(match.group(3)) if match and match.group(3) != "*" else None
        if start != self.offset or (self.size is not None and total is not None and total != self.size):
            raise ModelSourceResumeError(
                f"{self.display_url} answered the request for bytes {self.offset}- of {self.size} with "
                f"Content-Range {response.headers.get('Content-Range')!r}; the copy cannot resume"
            )
        if self.size is None:
            self.size = total
        self.resumes += 1

    def _failed(self, reason: str, retry_after_s: float | None = None) -> None:
        """Count a failure and wait before the next attempt, or raise when the attempts are used up."""
        self.close()
        self._failures += 1
        self.retries += 1
        if self._failures >= self.settings.max_attempts:
            raise ModelSourceDownloadError(
                f"{self.display_url}: {self._failures} attempts in a row failed; last: {reason}"
            )
        backoff = backoff_s(self._failures, base_s=self.settings.backoff_s, cap_s=_MAX_BACKOFF_S)
        pause = max(backoff, retry_after_s or 0.0)
        logger.warning("model source: retrying", extra={"reason": reason, "pause_s": round(pause, 2)})
        time.sleep(self._timeout(pause))

    def _timeout(self, seconds: float) -> float:
        """``seconds``, cut to what is left before the deadline; ModelCopyTimeoutError when nothing is."""
        if self.deadline is None:
            return seconds
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ModelCopyTimeoutError(
                f"the deadline passed after {self.offset} bytes of {self.display_url}"
            )
        return min(seconds, left)

    def _set_read_timeout(self) -> None:
        sock = getattr(getattr(self._response, "fp", None), "raw", None)
        sock = getattr(sock, "_sock", None)
        if sock is not None:
            sock.settimeout(self._timeout(self.settings.read_timeout_s))


def _retry_after(headers: Any) -> float | None:
    value = (headers.get("Retry-After") if headers is not None else None) or ""
    return min(float(value), _MAX_BACKOFF_S) if value.strip().isdigit() else None
