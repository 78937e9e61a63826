"""Stream a model object from S3 into an anonymous in-memory file (``memfd``), never touching disk.

    loader = S3ModelLoader(boto3.client("s3"), LoaderSettings())
    with loader.load(ModelSource(bucket="models", key="smollm2.gguf")) as model:
        llama = Llama(model_path=model.path)   # /proc/self/fd/N

``load`` leaves none of its threads, and closes the memfd if it fails: docs/architecture.md ("Loader").
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import http.client
import mmap
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, IncompleteReadError

from snapllm.engine import gguf
from snapllm.engine.settings import LoaderSettings, ModelSource
from snapllm.errors import (
    ChecksumMismatchError,
    ConfigurationError,
    ModelAccessDeniedError,
    ModelChangedError,
    ModelDownloadError,
    ModelLoadError,
    ModelNotFoundError,
    ModelSizeMismatchError,
)
from snapllm.retry import backoff_s

_READ_CHUNK = 1024 * 1024
# Hash in steps of this size: fewer wake-ups of the hashing thread, fewer GIL hand-offs with the receivers.
_HASH_STEP = 8 * 1024 * 1024
_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
_DENIED = {
    "403",
    "AccessDenied",
    "Forbidden",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
}
_CHANGED = {"412", "PreconditionFailed"}


@dataclass(frozen=True)
class DownloadStats:
    """What a load cost: reported in logs, the local runner's table and the benchmarks."""

    bytes: int
    seconds: float
    parts: int
    concurrency: int
    retries: int
    verified: bool
    hash_tail_seconds: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "seconds": round(self.seconds, 4),
            "mb_per_s": round(self.mb_per_s, 1),
            "parts": self.parts,
            "concurrency": self.concurrency,
            "retries": self.retries,
            "sha256_verified": self.verified,
        }


@dataclass
class InMemoryModel:
    """A model file held in a memfd. ``path`` is what llama.cpp opens; ``close()`` releases the fd."""

    fd: int
    size: int
    source: ModelSource
    stats: DownloadStats
    sha256: str | None = None
    _closed: bool = field(default=False, repr=False)

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)

    def __enter__(self) -> InMemoryModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TransientError(Exception):
    """An attempt (the HEAD, or a part's GET) failed in a way that another attempt may fix."""

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _classify(exc: ClientError, source: ModelSource) -> Exception:
    """Map an S3 error to the named error the caller can act on, or to a transient one."""
    code, status = _error_code(exc), _status(exc)
    if code in _NOT_FOUND or status == 404:
        return ModelNotFoundError(f"model object {source.uri} not found ({code or status})")
    if code in _DENIED or status == 403:
        return ModelAccessDeniedError(
            f"access denied reading {source.uri} ({code or status}); the role needs s3:GetObject on it "
            "(S3 also answers 403 for a missing key when the caller lacks s3:ListBucket)"
        )
    if code in _CHANGED or status == 412:
        return ModelChangedError(f"model object {source.uri} changed during the download; retry the init")
    if status >= 500 or status in (408, 429) or code in {"SlowDown", "RequestTimeout", "Throttling"}:
        return _TransientError(f"S3 answered {code or status}")
    return ModelLoadError(f"S3 refused {source.uri}: {code or status}: {exc}")


class S3ModelLoader:
    """Loads GGUF models from S3 into memfds. Thread-safe; one instance can load many models.

    Example::

        loader = S3ModelLoader.from_env()
        model = loader.load(ModelSource(bucket="models", key="smollm2.gguf"))
        print(model.stats.mb_per_s)
    """

    def __init__(self, s3_client: Any, settings: LoaderSettings | None = None) -> None:
        self._s3 = s3_client
        self._settings = settings or LoaderSettings()

    @staticmethod
    def client_config(settings: LoaderSettings) -> Config:
        """The botocore configuration the loader's bounds assume: the settings' timeouts, no SDK retries.

        The loader retries by itself, resuming a part where it broke off; SDK retries on top would multiply
        the attempts (and the time a failing load takes) without resuming anything.
        """
        return Config(
            max_pool_connections=max(10, settings.concurrency),
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            tcp_keepalive=True,
        )

    @classmethod
    def from_env(cls, settings: LoaderSettings | None = None) -> S3ModelLoader:
        """A loader with a boto3 client sized for the configured concurrency.

        The endpoint comes from boto3's own configuration (``AWS_ENDPOINT_URL_S3`` points it at a local S3).
        """
        settings = settings or LoaderSettings()
        return cls(boto3.client("s3", config=cls.client_config(settings)), settings)

    def read_object(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """A small object's bytes (a deploy's declared prompt prefixes); one larger than ``max_bytes``,
        missing or unreadable raises :class:`ConfigurationError`."""
        try:
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"]
            data = body.read(max_bytes + 1)
        except (ClientError, BotoCoreError) as exc:
            raise ConfigurationError(f"s3://{bucket}/{key} could not be read: {exc}") from exc
        if len(data) > max_bytes:
            raise ConfigurationError(f"s3://{bucket}/{key} is larger than {max_bytes} bytes")
        return data

    @property
    def settings(self) -> LoaderSettings:
        return self._settings

    def load(self, source: ModelSource) -> InMemoryModel:
        """Download ``source`` into a new memfd, verify it, and return it.

        Raises a subclass of :class:`ModelLoadError`; no fd is leaked on failure.
        """
        started = time.perf_counter()
        size, etag, published_digest = self._head(source)
        expected = source.sha256 or published_digest
        if size < gguf.HEADER_SIZE:
            raise ModelSizeMismatchError(f"{source.uri} is {size} bytes, too small to be a GGUF model")

        fd = os.memfd_create(f"snapllm:{source.name}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            retries, digest, hash_tail = self._download(fd, size, etag, source, hash_it=expected is not None)
        except BaseException:
            os.close(fd)
            raise
        seconds = time.perf_counter() - started
        if expected is not None and digest != expected:
            os.close(fd)
            raise ChecksumMismatchError(
                f"SHA-256 of {source.uri} is {digest}, expected {expected}; the object is corrupt or not "
                "the configured model"
            )
        part_size = self._settings.part_size
        stats = DownloadStats(
            bytes=size,
            seconds=seconds,
            parts=-(-size // part_size),
            concurrency=min(self._settings.concurrency, -(-size // part_size)),
            retries=retries,
            verified=expected is not None,
            hash_tail_seconds=hash_tail,
        )
        return InMemoryModel(fd=fd, size=size, source=source, stats=stats, sha256=digest)

    def _head(self, source: ModelSource) -> tuple[int, str, str | None]:
        last: _TransientError | None = None
        for _ in _attempts(self._settings, _sleep):
            try:
                head = self._s3.head_object(Bucket=source.bucket, Key=source.key)
                break
            except ClientError as exc:
                error = _classify(exc, source)
                if not isinstance(error, _TransientError):
                    raise error from exc
                last = error
            except BotoCoreError as exc:
                last = _TransientError(f"cannot reach S3: {type(exc).__name__}: {exc}")
        else:
            raise ModelDownloadError(
                f"HEAD {source.uri} failed after {self._settings.max_attempts} attempts: {last}"
            )
        published = (head.get("Metadata") or {}).get("sha256")
        published = published.strip().lower() if published else None
        return int(head["ContentLength"]), head["ETag"], published

    def _download(
        self, fd: int, size: int, etag: str, source: ModelSource, *, hash_it: bool
    ) -> tuple[int, str | None, float]:
        part_size = self._settings.part_size
        parts = [(offset, min(part_size, size - offset)) for offset in range(0, size, part_size)]
        workers = min(self._settings.concurrency, len(parts))
        progress = _DownloadProgress(parts)
        hasher = hashlib.sha256() if hash_it else None
        header_checked = False
        hashed = 0
        seen = 0
        hash_tail = 0.0

        allocator = threading.Thread(
            target=_allocate_ahead, args=(fd, size, progress), name="snapllm-memfd-alloc", daemon=True
        )
        allocator.start()
        with (
            _joined(allocator),
            mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as view,
            memoryview(view) as bytes_view,
            concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="snapllm-s3") as pool,
        ):
            fetch = functools.partial(self._fetch_part, bytes_view, source, etag)
            futures = [
                pool.submit(_failing_into, progress, fetch, index, offset, length, size, progress)
                for index, (offset, length) in enumerate(parts)
            ]
            try:
                while True:
                    # Raises the first part's failure, however its timing falls against this loop's.
                    prefix, finished = progress.wait_for_more(seen + _HASH_STEP)
                    seen = prefix
                    if not header_checked and prefix >= gguf.HEADER_SIZE:
                        gguf.check_header(bytes(bytes_view[: gguf.HEADER_SIZE]), source=source.uri)
                        header_checked = True
                    if hasher is not None and prefix > hashed:
                        # Hash the contiguous written prefix while the rest streams in; hashlib releases
                        # the GIL, so the download threads keep writing meanwhile.
                        tail_started = time.perf_counter()
                        hasher.update(bytes_view[hashed:prefix])
                        hashed = prefix
                        if finished:
                            hash_tail = time.perf_counter() - tail_started
                    if finished:
                        break
            except BaseException:
                progress.abort()
                for future in futures:
                    future.cancel()
                raise
        return progress.retries, hasher.hexdigest() if hasher is not None else None, hash_tail

    def _fetch_part(
        self,
        target: memoryview,
        source: ModelSource,
        etag: str,
        index: int,
        offset: int,
        length: int,
        size: int,
        progress: _DownloadProgress,
    ) -> None:
        attempts = self._settings.max_attempts
        last: _TransientError | None = None
        for attempt in _attempts(self._settings, progress.pause):
            if attempt:
                progress.add_retry()
            try:
                self._fetch_part_once(target, source, etag, index, offset, length, size, progress)
                return
            except _TransientError as exc:
                last = exc
        if progress.aborted:
            return
        assert last is not None
        where = f"bytes {offset}-{offset + length - 1} of {source.uri}"
        if last.truncated:
            raise ModelSizeMismatchError(f"truncated body for {where} after {attempts} attempts: {last}")
        raise ModelDownloadError(f"could not download {where} after {attempts} attempts: {last}")

    def _fetch_part_once(
        self,
        target: memoryview,
        source: ModelSource,
        etag: str,
        index: int,
        offset: int,
        length: int,
        size: int,
        progress: _DownloadProgress,
    ) -> None:
        # A retry resumes after the bytes an earlier attempt already wrote: the ETag pins the content.
        done = progress.written(index)
        start, end = offset + done, offset + length - 1
        if progress.aborted:
            return
        request: dict[str, Any] = {"Bucket": source.bucket, "Key": source.key, "IfMatch": etag}
        if start > 0 or end < size - 1:
            request["Range"] = f"bytes={start}-{end}"
        try:
            response = self._s3.get_object(**request)
        except ClientError as exc:
            raise _classify(exc, source) from exc
        except BotoCoreError as exc:
            raise _TransientError(f"{type(exc).__name__}: {exc}") from exc

        wanted = end - start + 1
        announced = int(response.get("ContentLength", -1))
        if announced != wanted:
            response["Body"].close()
            raise ModelSizeMismatchError(
                f"S3 returned {announced} bytes for bytes {start}-{end} of {source.uri}, expected {wanted}"
            )
        body = response["Body"]
        position = start
        broke_off: _TransientError | None = None
        try:
            for received in _receive(body, target, start, end, progress):
                position += received
                progress.advance(index, received)
        except (BotoCoreError, OSError, http.client.HTTPException) as exc:
            # A reset socket, a read that stalled past the read timeout (TimeoutError) or a body cut short:
            # resume from `position`. Only the message is kept: the traceback's frames hold views of the
            # mapping (see _failing_into).
            broke_off = _TransientError(
                f"body of bytes {start}-{end} broke off at byte {position}: {type(exc).__name__}: {exc}",
                truncated=isinstance(exc, http.client.IncompleteRead | IncompleteReadError),
            )
        finally:
            body.close()
        if broke_off is not None:
            raise broke_off
        if position <= end and not progress.aborted:
            raise _TransientError(f"got {position - start} of {wanted} bytes", truncated=True)


def _failing_into(progress: _DownloadProgress, task: Callable[..., None], *args: Any) -> None:
    """A download thread's task: run ``task``, or hand its failure to the thread that waits."""
    try:
        task(*args)
    except BaseException as exc:
        # The frames of a traceback keep their locals, and some are views of the mapping: while any
        # lives, the mapping cannot be closed. The failure goes on with its trace, without the locals.
        _drop_locals(exc)
        progress.fail(exc)


def _attempts(settings: LoaderSettings, pause: Callable[[float], bool]) -> Iterator[int]:
    """Attempt numbers ``0 .. max_attempts - 1``; before each retry, ``pause`` for a backoff.

    ``pause`` returns False to stop early.
    """
    for attempt in range(settings.max_attempts):
        if attempt and not pause(backoff_s(attempt, base_s=settings.backoff_base_s)):
            return
        yield attempt


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


def _drop_locals(exc: BaseException) -> None:
    """Clear the local variables of every frame in ``exc``'s traceback and in those of its causes."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]


_ALLOCATE_STEP = 8 * 1024 * 1024


def _allocate_ahead(fd: int, size: int, progress: _DownloadProgress) -> None:
    """Allocate the memfd's pages in order, ahead of the bytes arriving from the network.

    Each first write to a fresh shared-memory page faults to allocate and zero it; measured here that adds
    about 40% to receiving a model. ``posix_fallocate`` releases the GIL, so allocating ahead overlaps
    that work with waiting on the network. Best effort: where it is refused, pages fault on write instead.
    """
    for offset in range(0, size, _ALLOCATE_STEP):
        if progress.aborted or progress.finished:
            return
        try:
            os.posix_fallocate(fd, offset, min(_ALLOCATE_STEP, size - offset))
        except OSError:
            return


@contextlib.contextmanager
def _joined(thread: threading.Thread) -> Iterator[None]:
    try:
        yield
    finally:
        thread.join()


def _receive(
    body: Any, target: memoryview, start: int, end: int, progress: _DownloadProgress
) -> Iterator[int]:
    """Copy a response body into ``target[start:end + 1]``, yielding the byte count of each piece.

    Where botocore exposes the underlying ``http.client`` response, the socket receives straight into the
    target (``recv_into`` releases the GIL, so the hashing thread runs meanwhile); otherwise the body is
    read in chunks and copied. Each window onto the target is released as soon as its read returns or
    fails: a view left alive would keep the mapping from being closed.
    """
    raw = getattr(getattr(body, "_raw_stream", None), "_fp", None)
    position = start
    if isinstance(raw, http.client.HTTPResponse):
        while position <= end and not progress.aborted:
            with target[position : min(position + _READ_CHUNK, end + 1)] as window:
                received = raw.readinto(window)
            if not received:
                return
            position += received
            yield received
        return
    while position <= end and not progress.aborted:
        chunk = body.read(min(_READ_CHUNK, end - position + 1))
        if not chunk:
            return
        target[position : position + len(chunk)] = chunk
        position += len(chunk)
        yield len(chunk)


class _DownloadProgress:
    """Bytes written per part and the first failure, shared by the download threads and the hashing thread.

    A failure is sticky: once a part has failed, every wait returns at once and raises it, so the hashing
    thread cannot miss it whenever it happens (while the thread waits, hashes or checks the header).
    """

    def __init__(self, parts: list[tuple[int, int]]) -> None:
        self._parts = parts
        self._total = sum(length for _, length in parts)
        self._written = [0] * len(parts)
        self._cond = threading.Condition()
        self._failure: BaseException | None = None
        self.retries = 0
        self.aborted = False
        self.finished = False

    def written(self, index: int) -> int:
        with self._cond:
            return self._written[index]

    def advance(self, index: int, count: int) -> None:
        with self._cond:
            self._written[index] += count
            self._cond.notify_all()

    def add_retry(self) -> None:
        with self._cond:
            self.retries += 1

    def fail(self, failure: BaseException) -> None:
        """Record a part's failure (the first one wins) and stop every other part."""
        with self._cond:
            if self._failure is None:
                self._failure = failure
            self.aborted = True
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self.aborted = True
            self._cond.notify_all()

    def pause(self, seconds: float) -> bool:
        """Sleep between attempts; returns False at once if the download is aborted meanwhile."""
        with self._cond:
            self._cond.wait_for(lambda: self.aborted, timeout=seconds)
            return not self.aborted

    def _prefix(self) -> int:
        prefix = 0
        for (_, length), written in zip(self._parts, self._written, strict=True):
            prefix += written
            if written < length:
                break
        return prefix

    def wait_for_more(self, at_least: int) -> tuple[int, bool]:
        """Block until ``at_least`` contiguous bytes are written or every byte is; raise a part's failure.

        Returns the contiguous prefix length and whether every byte is written.
        """
        with self._cond:
            self._cond.wait_for(lambda: self.aborted or self._prefix() >= min(at_least, self._total))
            if self._failure is not None:
                raise self._failure
            prefix = self._prefix()
            self.finished = prefix == self._total
            return prefix, self.finished
