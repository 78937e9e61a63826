"""Keep checkpointed state lean: every step result is measured, and one over the budget goes to S3.

    budget = StateBudget(store, limit_bytes=64 * 1024, run_id="3f2a...")
    kept = budget.fit("excerpt report.md", {"text": "..." * 100_000})   # {"$artifact": {...}}
    value = budget.resolve(kept)          # reads it back only where a later step needs it

Sizes are measured as ``JsonSerDes`` encodes the value, the serializer every agent step uses.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from aws_durable_execution_sdk_python import BatchResult
from aws_durable_execution_sdk_python.serdes import SerDes, SerDesContext

from snapllm.agent.artifacts import ArtifactRef, ArtifactStore
from snapllm.agent.errors import StateBudgetExceededError

OFFLOADED = "$artifact"
MIN_SHARE_BYTES = 384


def checkpoint_size(value: Any) -> int:
    """Bytes the value takes in a checkpoint when serialized with ``JsonSerDes``."""
    return len(json.dumps(value).encode())


def is_offloaded(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {OFFLOADED}


def run_id_from_arn(execution_arn: str) -> str:
    """A short, stable, S3-safe id of a durable execution (the same on every replay)."""
    return hashlib.sha256(execution_arn.encode()).hexdigest()[:24]


class StateBudget:
    """Decides, per value, whether it may be checkpointed or must be offloaded to S3."""

    def __init__(self, store: ArtifactStore, *, limit_bytes: int, run_id: str) -> None:
        self._store = store
        self.limit_bytes = limit_bytes
        self.run_id = run_id

    def fit(self, name: str, value: Any) -> Any:
        """Return ``value`` if it fits the budget, else a reference to a copy of it in S3.

        The key is derived from the content, so a retried or replayed step writes the same object.
        """
        encoded = json.dumps(value)
        if len(encoded.encode()) <= self.limit_bytes:
            return value
        digest = hashlib.sha256(encoded.encode()).hexdigest()[:16]
        ref = self._store.put_json(f"runs/{self.run_id}/{_slug(name)}-{digest}.json", value)
        return {OFFLOADED: ref}

    def share(self, parts: int) -> StateBudget:
        """A budget for each of ``parts`` values that are checkpointed again together (a map's items).

        A reference is about 200 bytes, so no share is smaller than that.
        """
        # The batch envelope: '{"all": [], "completionReason": "ALL_COMPLETED"}' plus, per item,
        # '{"index": 0, "status": "SUCCEEDED", "result": , "error": null}' and a separator.
        overhead = 64 + 72 * parts
        limit = max((self.limit_bytes - overhead) // max(parts, 1), MIN_SHARE_BYTES)
        return StateBudget(self._store, limit_bytes=limit, run_id=self.run_id)

    def require(self, name: str, value: Any) -> Any:
        """Check a value that cannot be offloaded (the run's input, the final result)."""
        size = checkpoint_size(value)
        if size > self.limit_bytes:
            raise StateBudgetExceededError(
                f"{name} is {size} bytes, over the state budget of {self.limit_bytes} bytes"
            )
        return value

    def resolve(self, value: Any) -> Any:
        """The value itself, reading it back from S3 if :meth:`fit` offloaded it."""
        if is_offloaded(value):
            ref: ArtifactRef = value[OFFLOADED]
            return self._store.get_json(ref)
        return value


class BatchJsonSerDes(SerDes[BatchResult[Any]]):
    """Plain-JSON serializer for a map's :class:`BatchResult`.

    The SDK's default serializer tags every value with its type (``{"t": "s", "v": ...}``), which more
    than doubles small results; plain JSON keeps the checkpoint to what the budget measured.
    """

    def serialize(self, value: BatchResult[Any], _: SerDesContext) -> str:
        return json.dumps(value.to_dict())

    def deserialize(self, data: str, _: SerDesContext) -> BatchResult[Any]:
        return BatchResult.from_dict(json.loads(data))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:80] or "value"
