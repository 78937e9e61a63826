"""Artifacts in S3: parse document URIs, read byte ranges, write offloaded values by content hash.

Everything the agent stores or reads lives under one prefix of one bucket (the function's IAM policy
allows nothing else), so every URI is checked against that prefix before any request::

    store = ArtifactStore(s3_client, bucket="snapllm-models", prefix="agent/")
    doc = store.document("s3://snapllm-models/agent/documents/notes.md")
    store.head(doc).size, store.read_range(doc, 0, 1024)
    ref = store.put_json("runs/abc/plan.json", {"plan": "..."})   # {"bucket", "key", "size", "sha256"}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, TypedDict

from botocore.exceptions import BotoCoreError, ClientError

from snapllm.agent.errors import (
    AgentInputError,
    ArtifactStoreError,
    DocumentAccessDeniedError,
    DocumentNotFoundError,
)


class ArtifactRef(TypedDict):
    """What the checkpoint keeps of a value that lives in S3."""

    bucket: str
    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class S3Location:
    """A bucket and key, parsed from ``s3://bucket/key``."""

    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        if not isinstance(uri, str) or not uri.startswith("s3://"):
            raise AgentInputError(f"a document must be an s3:// URI, got {uri!r}")
        bucket, _, key = uri[len("s3://") :].partition("/")
        if not bucket or not key or key.endswith("/"):
            raise AgentInputError(f"{uri!r} does not name an object (s3://bucket/key)")
        return cls(bucket=bucket, key=key)


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    content_type: str
    etag: str


_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_DENIED = {"403", "AccessDenied", "AllAccessDisabled"}


class ArtifactStore:
    """Reads documents and writes artifacts under ``s3://{bucket}/{prefix}`` only."""

    def __init__(self, s3_client: Any, *, bucket: str, prefix: str) -> None:
        self._s3 = s3_client
        self.bucket = bucket
        self.prefix = prefix

    def document(self, uri: str) -> S3Location:
        """Parse ``uri`` and refuse anything outside the agent's prefix (IAM would deny it anyway)."""
        location = S3Location.parse(uri)
        if location.bucket != self.bucket or not location.key.startswith(self.prefix):
            raise DocumentAccessDeniedError(
                f"{uri} is outside the agent's storage s3://{self.bucket}/{self.prefix}; "
                "upload documents under that prefix"
            )
        return location

    def head(self, location: S3Location) -> ObjectInfo:
        response = self._call("head_object", location, Bucket=location.bucket, Key=location.key)
        return ObjectInfo(
            size=int(response["ContentLength"]),
            content_type=str(response.get("ContentType") or "application/octet-stream"),
            etag=str(response.get("ETag", "")).strip('"'),
        )

    def read_range(self, location: S3Location, offset: int, length: int) -> bytes:
        """Read at most ``length`` bytes from ``offset``: only that range crosses the network."""
        if length <= 0:
            return b""
        response = self._call(
            "get_object",
            location,
            Bucket=location.bucket,
            Key=location.key,
            Range=f"bytes={offset}-{offset + length - 1}",
        )
        return response["Body"].read()

    def put_bytes(self, relative_key: str, data: bytes, *, content_type: str) -> ArtifactRef:
        key = f"{self.prefix}{relative_key}"
        digest = hashlib.sha256(data).hexdigest()
        self._call(
            "put_object",
            S3Location(self.bucket, key),
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType=content_type,
            Metadata={"sha256": digest},
        )
        return ArtifactRef(bucket=self.bucket, key=key, size=len(data), sha256=digest)

    def put_json(self, relative_key: str, value: Any) -> ArtifactRef:
        return self.put_bytes(relative_key, _json_bytes(value), content_type="application/json")

    def get_json(self, ref: ArtifactRef) -> Any:
        """Read an artifact back and check it is the one the checkpoint refers to."""
        location = S3Location(ref["bucket"], ref["key"])
        data = self._call("get_object", location, Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
        if hashlib.sha256(data).hexdigest() != ref["sha256"]:
            raise ArtifactStoreError(f"{location.uri} changed since it was checkpointed (sha256 differs)")
        return json.loads(data)

    def _call(self, operation: str, location: S3Location, **kwargs: Any) -> Any:
        try:
            return getattr(self._s3, operation)(**kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _NOT_FOUND:
                raise DocumentNotFoundError(f"{location.uri} does not exist") from exc
            if code in _DENIED:
                raise DocumentAccessDeniedError(f"the agent may not access {location.uri}") from exc
            if code in {"InvalidRange"}:
                return {"Body": _Empty()}
            raise ArtifactStoreError(f"S3 {operation} on {location.uri} failed: {code}") from exc
        except BotoCoreError as exc:
            raise ArtifactStoreError(f"S3 {operation} on {location.uri} failed: {exc}") from exc


class _Empty:
    def read(self) -> bytes:
        return b""


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
