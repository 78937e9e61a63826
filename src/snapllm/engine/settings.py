"""The engine's settings: where the model lives, how the loader fetches it, and llama.cpp's limits.

Plain values, built without reading any environment; the inference function builds them from its
``SNAPLLM_`` variables (:class:`snapllm.inference.settings.InferenceEnvironment`)::

    EngineSettings(n_ctx=4096, threads=2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MiB = 1024 * 1024
#: What the after-restore hook faults in (:mod:`snapllm.engine.prefault`).
PrefaultMode = Literal["none", "weights", "all"]


@dataclass(frozen=True)
class ModelSource:
    """Where the GGUF model lives and how to check it."""

    bucket: str
    key: str
    sha256: str | None = None
    name: str = "model"

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True)
class LoaderSettings:
    """How the model is fetched: ranged GETs of ``part_size`` bytes, ``concurrency`` at a time (S3 serves
    one connection at tens of MB/s; ``snapllm bench coldstart`` measures the trade-off).

    A failing load is bounded. The HEAD and each part get ``max_attempts`` (A) attempts; one that moves
    no byte ends within ``connect_timeout_s + read_timeout_s`` (C + R: at once if refused, reset or
    answered with an error status, after R without a byte if it stalls, after C if no connection opens),
    and retry k first sleeps a random fraction of ``backoff_base_s * 2**k`` (b). So a part (or the HEAD)
    gives up within :attr:`part_failure_bound_s`, ``A * (C + R) + b * (2**A - 2)``, plus the time of the
    bytes it did receive (a retry resumes). The first part to give up fails the load and stops the others
    within one more attempt (C + R; a sleeping one wakes at once): the load raises within
    :attr:`failure_bound_s`, ``part_failure_bound_s + C + R``, after the healthy bytes before that part,
    181 s and 216 s with the defaults. A connection that keeps sending, however slowly, is not a failure:
    only the function timeout bounds it.
    """

    part_size: int = 16 * MiB
    concurrency: int = 8
    max_attempts: int = 5
    backoff_base_s: float = 0.2
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0

    @property
    def attempt_bound_s(self) -> float:
        """Longest one attempt that moves no byte can take: connect, then a read that times out."""
        return self.connect_timeout_s + self.read_timeout_s

    @property
    def part_failure_bound_s(self) -> float:
        """Longest a part (or the HEAD) retries a fault that lets no byte through before giving up."""
        backoff = self.backoff_base_s * (2**self.max_attempts - 2)
        return self.max_attempts * self.attempt_bound_s + backoff

    @property
    def failure_bound_s(self) -> float:
        """Longest a load that fails for good takes, after the healthy bytes before the failing part."""
        return self.part_failure_bound_s + self.attempt_bound_s


@dataclass(frozen=True)
class EngineSettings:
    """llama.cpp and generation limits."""

    n_ctx: int = 2048
    max_tokens: int = 512
    max_prompt_chars: int = 32_000
    threads: int | None = None
    n_batch: int = 512
    deadline_margin_ms: int = 1500
    warmup_tokens: int = 4
    verbose: bool = False
    # Off: the memfd already holds the weights, and a repacked copy would double them in RAM and in the
    # snapshot. On trades that memory for faster Q4_0 / Q4_K matrix products on Graviton.
    repack_weights: bool = False
    # What the after-restore hook faults in before the first request (snapllm.engine.prefault).
    prefault: PrefaultMode = "all"
    # One thread: two measured slower on the restore (0.31 s against 0.17 s, SmolLM2 on 2 cores) and left
    # the first request's generation 0.1-0.2 s slower than a warm one's; one thread left no gap.
    prefault_threads: int = 1
    prefault_budget_ms: int = 5000
