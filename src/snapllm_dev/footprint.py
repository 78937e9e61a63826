"""The memory a model needs, estimated from its GGUF metadata and file size before anything is loaded.

    footprint = MemoryFootprint.estimate(metadata, weights_bytes=size, n_ctx=2048)
    footprint.needed_bytes   # what serving holds, or the load's peak if higher

``snapllm preflight --model`` checks a function's ``MemorySize`` against it, and ``snapllm bench coldstart``
checks the peak RSS it measures against it: one estimate, so a bench run tests what preflight promises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024
#: The Python runtime, snapllm and llama.cpp's own allocations, measured as the RSS of the function with the
#: 135M model less the model's bytes (about 180 MiB), rounded up.
RUNTIME_MIB = 256
#: llama.cpp's compute buffers, as a share of the weights (the graph's activations and the logits), with a
#: floor: an estimate that errs high.
COMPUTE_SHARE = 0.10
COMPUTE_FLOOR_MIB = 64


def kv_cache_bytes(metadata: Mapping[str, Any], n_ctx: int) -> int:
    """An f16 KV cache's bytes for ``n_ctx`` tokens, from the model's attention shape (0 where unknown)."""
    architecture = str(metadata.get("general.architecture", ""))

    def number(key: str, default: int = 0) -> int:
        try:
            return int(metadata.get(f"{architecture}.{key}", default))
        except (TypeError, ValueError):
            return default

    layers = number("block_count")
    heads = number("attention.head_count", 1) or 1
    kv_heads = number("attention.head_count_kv", heads) or heads
    key_size = number("attention.key_length") or number("embedding_length") // heads
    value_size = number("attention.value_length") or key_size
    return layers * n_ctx * kv_heads * (key_size + value_size) * 2


@dataclass(frozen=True)
class MemoryFootprint:
    """What a loaded model holds in memory, and what its load holds at its peak."""

    weights_bytes: int
    kv_cache_bytes: int
    #: The declared prompt prefixes' saved KV states (``SNAPLLM_PROMPT_PREFIXES``), held for good.
    prefix_states_bytes: int = 0

    @classmethod
    def estimate(cls, metadata: Mapping[str, Any], *, weights_bytes: int, n_ctx: int) -> MemoryFootprint:
        return cls(weights_bytes=weights_bytes, kv_cache_bytes=kv_cache_bytes(metadata, n_ctx))

    @property
    def serving_bytes(self) -> int:
        """The weights (one copy), the KV cache, the declared prefixes' states, llama.cpp's compute buffers
        and the runtime."""
        compute = max(COMPUTE_FLOOR_MIB * MiB, int(self.weights_bytes * COMPUTE_SHARE))
        return (
            self.weights_bytes + self.kv_cache_bytes + self.prefix_states_bytes + compute + RUNTIME_MIB * MiB
        )

    @property
    def load_peak_bytes(self) -> int:
        """Repacked weights (the default) are read out of the memfd while it still holds them: two copies,
        and the runtime."""
        return 2 * self.weights_bytes + RUNTIME_MIB * MiB

    @property
    def needed_bytes(self) -> int:
        """What the function needs: what serving holds, or the load's peak if higher."""
        return max(self.serving_bytes, self.load_peak_bytes)
