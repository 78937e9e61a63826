"""A stream of bytes into one S3 object, as a multipart upload that completes only with the right digest.

    upload = ModelUpload(boto3.client("s3"), bucket="models", key="m.gguf", sha256=expected)
    if upload.existing() is None:                       # HEAD: is that digest there already?
        result = upload.write(source.readinto, size=source.size, deadline=deadline)

Its memory, and what a failure leaves in S3: docs/deploy.md ("How the copy is written").
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from snapllm.engine import gguf
from snapllm.errors import (
    ModelCopySizeError,
    ModelCopyTimeoutError,
    ModelDigestMismatchError,
    ModelUploadError,
)

logger = logging.getLogger("snapllm.deploy")

MiB = 1024 * 1024
#: S3's bounds: every part but the last at least 5 MiB, at most 5 GiB, at most 10,000 parts.
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * 1024 * MiB
MAX_PARTS = 10_000
DIGEST_METADATA = "sha256"
_ABSENT = {"404", "NoSuchKey", "NotFound", "403", "AccessDenied", "Forbidden"}

ReadInto = Callable[[memoryview], int]
Progress = Callable[[int, int | None], None]


class ThrottledProgress:
    """A :data:`Progress` callback that passes on at most one report every ``every_s`` seconds (and always
    the last one), with the rate so far: ``report(done, size, mib_per_s)``."""

    def __init__(self, report: Callable[[int, int | None, float], None], *, every_s: float) -> None:
        self.report = report
        self.every_s = every_s
        self.started = time.monotonic()
        self.last = float("-inf")

    def __call__(self, done: int, size: int | None) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and done != size:
            return
        self.last = now
        self.report(done, size, done / MiB / max(now - self.started, 1e-6))


@dataclass(frozen=True)
class UploadSettings:
    part_size: int = 64 * MiB
    #: Parts uploaded while the next one is read.
    concurrency: int = 2

    def __post_init__(self) -> None:
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ValueError(f"part_size must be between 5 MiB and 5 GiB, got {self.part_size}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")

    def part_size_for(self, size: int | None) -> int:
        """The part size, raised (to whole MiB) when ``size`` would need more than 10,000 parts."""
        if size is None or size <= self.part_size * MAX_PARTS:
            return self.part_size
        return min(MAX_PART_SIZE, math.ceil(size / MAX_PARTS / MiB) * MiB)


@dataclass(frozen=True)
class ExistingObject:
    size: int
    sha256: str | None
    version_id: str | None


@dataclass(frozen=True)
class UploadResult:
    size: int
    sha256: str
    parts: int
    seconds: float
    version_id: str | None

    @property
    def mib_per_s(self) -> float:
        return self.size / MiB / self.seconds if self.seconds > 0 else 0.0


class ModelUpload:
    """Writes one object; see the module docstring."""

    def __init__(
        self,
        client: Any,
        *,
        bucket: str,
        key: str,
        sha256: str,
        settings: UploadSettings | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.sha256 = sha256
        self.settings = settings or UploadSettings()
        self.progress = progress

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def existing(self) -> ExistingObject | None:
        """The object at the key, if it is there. A 403 counts as absent: without ``s3:ListBucket`` S3
        answers 403 for a missing key, and a real denial shows when the upload is refused."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if _code(exc) in _ABSENT:
                return None
            raise ModelUploadError(f"cannot check {self.location}: {_describe(exc)}") from None
        except BotoCoreError as exc:
            raise ModelUploadError(f"cannot check {self.location}: {exc}") from None
        return ExistingObject(
            size=int(head.get("ContentLength", 0)),
            sha256=(head.get("Metadata") or {}).get(DIGEST_METADATA),
            version_id=head.get("VersionId"),
        )

    def write(
        self,
        read_into: ReadInto,
        *,
        size: int | None,
        deadline: float | None = None,
        source: str = "the source",
    ) -> UploadResult:
        """Upload everything ``read_into`` yields (until it returns 0); ``size``, when known, must match.
        ``source`` names where the bytes come from in error messages.

        Raises:
            ModelDigestMismatchError, ModelCopySizeError, NotAGGUFError: The bytes are not the expected
                ones (the first part must start with a GGUF header); the upload is aborted.
            ModelCopyTimeoutError: ``deadline`` (a ``time.monotonic()`` value) passed; aborted.
            ModelUploadError: S3 refused a request; aborted.
            Whatever ``read_into`` raises; aborted.
        """
        started = time.monotonic()
        try:
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket,
                Key=self.key,
                Metadata={DIGEST_METADATA: self.sha256},
                ContentType="application/octet-stream",
            )["UploadId"]
        except (ClientError, BotoCoreError) as exc:
            raise ModelUploadError(f"cannot start an upload to {self.location}: {_describe(exc)}") from None
        try:
            parts, received, digest = self._parts(upload_id, read_into, size, deadline, source)
            if size is not None and received != size:
                raise ModelCopySizeError(f"received {received} bytes from {source}, which announced {size}")
            if digest != self.sha256:
                raise ModelDigestMismatchError(
                    f"the SHA-256 of the {received} bytes from {source} is {digest}, not the expected "
                    f"{self.sha256}; nothing was written to {self.location}"
                )
            completed = self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException as exc:
            self._abort(upload_id)
            if isinstance(exc, ClientError | BotoCoreError):
                raise ModelUploadError(f"uploading {self.location} failed: {_describe(exc)}") from None
            raise
        return UploadResult(
            size=received,
            sha256=digest,
            parts=len(parts),
            seconds=time.monotonic() - started,
            version_id=completed.get("VersionId"),
        )

    def _parts(
        self, upload_id: str, read_into: ReadInto, size: int | None, deadline: float | None, source: str
    ) -> tuple[list[dict[str, Any]], int, str]:
        part_size = self.settings.part_size_for(size)
        hasher = hashlib.sha256()
        received = 0
        done: list[dict[str, Any]] = []
        pending: deque[Future[dict[str, Any]]] = deque()
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="snapllm-upload") as pool:
            try:
                for number in range(1, MAX_PARTS + 1):
                    buffer = bytearray(part_size)
                    filled = _fill(read_into, memoryview(buffer), deadline, received)
                    if filled == 0 and number > 1:
                        break
                    if number == 1:
                        gguf.check_header(bytes(buffer[: min(filled, gguf.HEADER_SIZE)]), source=source)
                    body = buffer if filled == part_size else buffer[:filled]
                    del buffer
                    hasher.update(body)
                    while len(pending) >= self.settings.concurrency:
                        done.append(pending.popleft().result())
                    pending.append(pool.submit(self._upload_part, upload_id, number, body))
                    received += filled
                    if self.progress is not None:
                        self.progress(received, size)
                    if filled < part_size:
                        break
                else:
                    raise ModelCopySizeError(f"more than {MAX_PARTS} parts of {part_size} bytes")
                while pending:
                    done.append(pending.popleft().result())
            finally:
                for future in pending:
                    future.cancel()
        return done, received, hasher.hexdigest()

    def _upload_part(self, upload_id: str, number: int, body: bytearray) -> dict[str, Any]:
        answer = self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=upload_id, PartNumber=number, Body=bytes(body)
        )
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def _abort(self, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as exc:
            # The original failure is what the caller needs to hear about; S3's lifecycle rule for
            # incomplete uploads (or a retry) cleans up the parts.
            logger.error("aborting the upload failed", extra={"key": self.key, "error": _describe(exc)})


def _fill(read_into: ReadInto, view: memoryview, deadline: float | None, before: int) -> int:
    """Read until ``view`` is full or the source ends; the number of bytes read."""
    filled = 0
    while filled < len(view):
        if deadline is not None and time.monotonic() >= deadline:
            raise ModelCopyTimeoutError(f"the deadline passed after {before + filled} bytes")
        received = read_into(view[filled:])
        if not received:
            break
        filled += received
    return filled


def _code(exc: ClientError) -> str:
    status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return str(status) if status in (403, 404) else str((exc.response.get("Error") or {}).get("Code", ""))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        return f"{error.get('Code', 'Error')}: {error.get('Message') or exc}"
    return str(exc)
