"""The engine's settings: where the model lives, how the loader fetches it, and llama.cpp's limits.

Plain values, built without reading any environment; each field is the one declaration of its setting,
which the inference function reads from its ``SNAPLLM_`` variables by subclassing the class
(:mod:`snapllm.inference.settings`)::

    EngineSettings(n_ctx=4096, threads=2)
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from snapllm.environment import Settings

MiB = 1024 * 1024
#: What the after-restore hook faults in (:mod:`snapllm.engine.prefault`).
PrefaultMode = Literal["none", "weights", "all"]
#: How an embedding model pools its tokens into one vector ("model": the GGUF's own pooling type); "rank"
#: is a reranker's: the pooled token through its classification head, a score per query-document pair.
EmbeddingPooling = Literal["model", "mean", "cls", "last", "rank"]
#: The value cache's element types on offer: two bytes each, so the KV cache's size does not depend on it.
ValueCacheType = Literal["f16", "bf16"]

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
#: How many of a batch's rows ggml's repacked weight kernels multiply at once: rows in whole groups of four
#: share one read of the weights, a row outside a group reads them alone (both give the same bits in
#: snapllm's build: docs/decoding.md).
REPACKED_ROW_GROUP = 4
#: The prefix cache's default bound, as a share of the function's memory: 188 MiB of 3,008 (three 1,700-token
#: prefixes of Llama 3.2 1B, at 32 KiB a token), 640 MiB of 10,240.
PREFIX_CACHE_SHARE = 1 / 16
#: The prefix cache's default bound where the function's memory is unknown (a local stack, a test), in MiB.
PREFIX_CACHE_LOCAL_MB = 128


def prefix_cache_bytes(configured_mb: int | None, function_memory_mb: int | None) -> int:
    """The prefix cache's bound in bytes: ``configured_mb`` (``SNAPLLM_PREFIX_CACHE_MB``) when set, else
    :data:`PREFIX_CACHE_SHARE` of a function of ``function_memory_mb`` MB, or :data:`PREFIX_CACHE_LOCAL_MB`
    where that is unknown (None)."""
    if configured_mb is not None:
        return configured_mb * MiB
    if function_memory_mb is None:
        return PREFIX_CACHE_LOCAL_MB * MiB
    return int(function_memory_mb * MiB * PREFIX_CACHE_SHARE)


def _file_name(data: dict[str, Any]) -> str:
    return str(data.get("key", "")).rsplit("/", 1)[-1].removesuffix(".gguf")


class ModelSource(Settings):
    """Where the GGUF model lives and how to check it."""

    bucket: str = Field(min_length=1)
    """S3 bucket of the GGUF model object (the template sets it)."""
    key: str = Field(min_length=1)
    """Key of the GGUF model object in the bucket (the template sets it)."""
    sha256: str | None = Field(None, json_schema_extra={"unset": "object metadata `sha256`"})
    """Expected SHA-256 of the model (64 hex digits); with neither it nor the object's `sha256` metadata,
    the download is not verified."""
    name: str = Field(default_factory=_file_name, json_schema_extra={"unset": "key's file name"})
    """Model name in responses and for routing."""

    @field_validator("sha256")
    @classmethod
    def _sha256_hex(cls, digest: str | None) -> str | None:
        if digest is not None and not _SHA256_HEX.match(digest := digest.lower()):
            raise ValueError("must be 64 hex digits")
        return digest

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class LoaderVariables(Settings):
    """The loader's settings a deployment sets (``SNAPLLM_S3_*``): ranged GETs of ``part_size_mb`` MiB,
    ``concurrency`` at a time, and how long a failing one is retried."""

    part_size_mb: int = Field(16, ge=1)
    """Size of each ranged GET of the model, in MiB."""
    concurrency: int = Field(8, ge=1)
    """Ranged GETs of the model in flight at once."""
    max_attempts: int = Field(5, ge=1)
    """Attempts per part (a retry resumes after the bytes already written)."""
    connect_timeout_s: float = Field(5.0, ge=0.001)
    """Connect timeout of S3 requests, in seconds."""
    read_timeout_s: float = Field(30.0, ge=0.001)
    """Longest a read may wait for a byte before the part is retried, in seconds."""


class LoaderSettings(LoaderVariables):
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

    backoff_base_s: float = Field(0.2, ge=0)
    """Base of the random exponential pause before a retry, in seconds (not a variable: tests shorten it)."""

    @property
    def part_size(self) -> int:
        """Size of each ranged GET, in bytes."""
        return self.part_size_mb * MiB

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


class EngineSettings(Settings):
    """llama.cpp's model and context, and the after-restore prefault of their memory."""

    n_ctx: int = Field(2048, ge=16)
    """llama.cpp context size, in tokens."""
    n_batch: int = Field(512, ge=8)
    """llama.cpp batch size, in tokens (8 or more: a prompt's batches hold whole groups of rows)."""
    threads: int | None = Field(None, ge=1, json_schema_extra={"unset": "CPUs really available"})
    """Generation threads; unset, the CPUs really available (affinity mask and cgroup quota)."""
    thread_pool: bool = True
    """Keep llama.cpp's worker threads for the model's life (asleep between requests), instead of
    starting and joining them in every decode."""
    thread_poll: int = Field(50, ge=0, le=100)
    """How long the pool's workers poll for the next decode before sleeping, on ggml's scale (0: sleep at
    once; 50: ggml's and llama-server's default). Only within a request: between requests they sleep."""
    embedding_pooling: EmbeddingPooling | None = Field(None, json_schema_extra={"unset": "a text model"})
    """Serve the model as an embedding model (`/v1/embeddings`, no completions), pooling each input's
    tokens into one vector: `model` (the GGUF's own pooling type), `mean`, `cls` or `last`; or, with
    `rank` (or `model` for a GGUF whose pooling type is rank), as a reranker (`/v1/rerank`)."""
    verbose: bool = Field(False, validation_alias="SNAPLLM_LLAMA_VERBOSE")
    """llama.cpp's own logging, to stderr."""
    # Repacked weights are read out of a memfd into llama.cpp's own buffers rather than mapped: with the
    # memfd mapped too, its pages of every repacked tensor would stay resident beside their repacked copy
    # (and both would be in the snapshot). Read, the memfd is closed after the load and freed. A file on a
    # filesystem is mapped either way (``snapllm.engine.loaded.maps_weights``).
    repack_weights: bool = True
    """Let llama.cpp repack Q4_0 / Q4_K / IQ4_NL weights for the CPU's matrix kernels (1.2-1.7x faster
    prompts and decoding). A downloaded model (a memfd) is then read, not mapped: one copy in RAM and in
    the snapshot, the load peaking at two until the memfd is closed."""
    # On, as llama-server's `auto` has it on a CPU: whole prompts 10-20% faster. docs/decoding.md ("One
    # answer whatever the batch") says which kernels depend on a batch's shape and how the engine avoids them.
    flash_attention: bool = True
    """llama.cpp's flash attention (what llama-server's `auto` picks on a CPU): whole prompts 10-20% faster
    on a CPU. With `cache_type_v` bf16 its result for a token does not depend on the batch that computed it,
    so an answer does not depend on what the prompt cache held."""
    # bf16: ggml's tiled (many-row) and split (one row over a long cache) attention kernels need keys and
    # values of one type, so with bf16 values every batch runs the one row-by-row kernel, in float32, and a
    # token's attention is the same whatever batch computed it. f16 values pick the kernel by the batch's
    # rows (tiled for 64 or more, row by row for fewer, split for one row once the cache holds 512).
    # Measured on Qwen2.5-Coder-1.5B Q4_K_M at 2 threads, interleaved with f16 in one run: 1,000-token prompts
    # at 0.81 of f16's speed, decoding within the run's noise (docs/decoding.md).
    cache_type_v: ValueCacheType = "bf16"
    """The KV cache's type for values with flash attention: `bf16` (one attention kernel for any batch: a
    token's logits, and so an answer at temperature 0, do not depend on how the prompt was split or what
    the prompt cache held) or `f16` (llama.cpp's default: prompts of many hundred tokens about a fifth
    faster, answers that may change with the cache's history). Without flash attention values are f16."""
    # Off by default: on two cores a batch of four rows costs about 2.2 tokens' time, and on text the prompt
    # does not echo its guesses missed often enough to cost 5-9% (docs/benchmarks.md, "Speculative decoding").
    speculative: bool = False
    """Speculative decoding: guesses of the next tokens (the grammar's forced tokens, then n-grams of the
    prompt and the answer) verified in one batch, each token the one plain decoding picks (with bf16 values:
    `cache_type_v`). It gains where answers copy their prompt (a third faster quoting a document, on two
    cores); a request's `speculative: false` turns it off."""
    prefault: PrefaultMode = "all"
    """Memory the after-restore hook faults in, so the first request does not: `none`, `weights` (the
    model's mapping: a downloaded model is mapped only with `repack_weights` off) or `all` (the weights
    and the process's private memory: compute buffers, KV cache, heap; read weights are private memory).
    Its time counts toward the restore, which Lambda limits to 10 s."""
    # One thread: two measured slower on the restore (0.31 s against 0.17 s, SmolLM2 on 2 cores) and left
    # the first request's generation 0.1-0.2 s slower than a warm one's; one thread left no gap.
    prefault_threads: int = Field(1, ge=1)
    """Threads of the after-restore prefault. More may fault a multi-GB model in sooner on 6 vCPUs; check
    with `snapllm bench aws` that the first request does not pay for them."""
    prefault_budget_ms: int = Field(5000, ge=0, le=9000)
    """Longest the after-restore prefault runs, in milliseconds; what is left then, the first request
    faults in. Lambda fails a restore whose hooks take over 10 s."""

    # A restored state gives the answer the whole prompt evaluated afresh gives: every position computes
    # alike in any batch (docs/decoding.md; tests/integration/test_real_weights.py holds it on Qwen2.5-Coder).
    prefix_cache_mb: int | None = Field(None, ge=0, json_schema_extra={"unset": "1/16 of the memory"})
    """RAM for the KV states of recent conversations' prompt prefixes, in MiB: a request that starts like
    one of them restores its state rather than evaluating it again (least recently used dropped first; 0:
    only the live sequence). Unset: a sixteenth of the function's memory (188 MiB of 3,008), 128 MiB outside
    Lambda. The declared prefixes (`SNAPLLM_PROMPT_PREFIXES`) are kept besides."""

    def prefix_cache_bytes(self, function_memory_mb: int | None) -> int:
        """The prefix cache's bound in bytes, for a function of ``function_memory_mb`` MB (None: unknown)."""
        return prefix_cache_bytes(self.prefix_cache_mb, function_memory_mb)

    @property
    def batch_invariant_attention(self) -> bool:
        """Whether attention computes a token alike in every batch (flash attention over bf16 values)."""
        return self.flash_attention and self.cache_type_v == "bf16"

    @property
    def row_group(self) -> int:
        """How many rows the weight kernels multiply at once (:data:`REPACKED_ROW_GROUP`, or 1)."""
        return REPACKED_ROW_GROUP if self.repack_weights else 1
