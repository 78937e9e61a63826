"""The engine's settings: where the model lives, how the loader fetches it, and llama.cpp's limits.

Plain values, built without reading any environment; each field is the one declaration of its setting,
which the inference function reads from its ``SNAPLLM_`` variables by subclassing the class
(:mod:`snapllm.inference.settings`)::

    EngineSettings(n_ctx=4096, threads=2)
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

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
#: The fewest query rows for which ggml's flash attention over f16 keys and values runs its tiled kernel
#: (``GGML_FA_TILE_Q``); fewer run a row-by-row kernel that rounds differently.
FLASH_ATTENTION_TILE_ROWS = 64
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
    n_batch: int = Field(512, ge=1)
    """llama.cpp batch size, in tokens."""
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
    # On, as llama-server's `auto` has it on a CPU. Over f16 values ggml picks its attention kernel by a
    # batch's rows (tiled for 64 or more, row by row for fewer, split over the cache for one row once it
    # holds 512), so the engine evaluates prompts in batches of 64 tokens or more and reuses only positions
    # such batches computed (``snapllm.engine.decode``). Measured with greedy answers of 40 tokens to 300-
    # token prompts (26 prompts, SmolLM2 and Gemma 3, 2 threads), the answer sent again and a follow-up
    # with its answer sent back, each against the same prompt evaluated with nothing cached: none differed
    # this way, where with flash attention off 5 of 26 retries and 9 of 26 follow-ups ended otherwise (a
    # position evaluated alone, or while generating, rounds differently), and with f16 attention reusing
    # every cached position 12 and 6. The cost: a follow-up that reuses the cache evaluates at least 64
    # tokens and any answer it sends back (on SmolLM2 at 2 threads a 20-token follow-up took 0.43 s, 0.13 s
    # with flash attention off; after a 100-token answer 0.81 s, 0.15 s), while whole prompts of 300 and
    # 1,000 tokens took 0.87-0.88 of the time.
    flash_attention: bool = True
    """llama.cpp's flash attention (what llama-server's `auto` picks on a CPU): whole prompts 10-20% faster
    on a CPU. With f16 values (`cache_type_v`) a prompt that reuses the prompt cache evaluates again at
    least its last 64 tokens and any answer it sends back, so that its answer does not depend on what the
    cache held (with it off a position evaluated alone or while generating rounds differently, and a
    retried or continued chat may end otherwise); `n_batch` must be 128 or more."""
    # bf16: ggml's tiled (many-row) and split (long-cache decode) attention kernels need keys and values of
    # one type, so with bf16 values every batch runs its one row-by-row kernel, in float32: on SmolLM2 a
    # prompt's logits are the same evaluated whole, after a cached prefix, sent again, and with its last
    # tokens evaluated one by one (up to 0.71 apart with flash attention off, 0.65 with f16 values), so
    # every cached position is reused. That row-by-row kernel is slow on long prompts: at
    # 1,000 tokens prompts ran at 0.63-0.87 of f16's speed (0.97-0.99 at 512), decoding at the same.
    # The weights' own kernels may still depend on the batch (Q4_K's do, with flash attention off too): the
    # repacked ones' groups of four rows are kept by the decoder's batches (snapllm.engine.decode.ROW_GROUP).
    cache_type_v: ValueCacheType = "f16"
    """The KV cache's type for values with flash attention: `f16` (llama.cpp's default, and its fastest
    kernels) or `bf16` (one attention kernel for any batch, so the prompt cache is reused as without flash
    attention; slower prompts of many hundred tokens). Without flash attention values are f16."""
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

    # With flash attention (the default), a restored state gives the answer the whole prompt evaluated
    # afresh gives: a state holds only positions a prompt's batches computed (snapllm.engine.decode keeps
    # them apart from generated ones), and a prompt reuses from it by the live sequence's rule (whole groups
    # of four rows, the last 64 tokens evaluated again). Without flash attention a prompt that restores its
    # whole state evaluates its last token alone, as the same prompt sent again does, and may end otherwise.
    # Measured with Qwen2.5-Coder-0.5B Q4_K_M, Gemma 3 and SmolLM2 at 1 and 2 threads: 96 requests of two
    # alternating conversations, each restoring its state, every log probability equal to the prompt's
    # evaluated afresh (tests/integration/test_real_weights.py holds it).
    prefix_cache_mb: int | None = Field(None, ge=0, json_schema_extra={"unset": "1/16 of the memory"})
    """RAM for the KV states of recent conversations' prompt prefixes, in MiB: a request that starts like
    one of them restores its state rather than evaluating it again (least recently used dropped first; 0:
    only the live sequence). Unset: a sixteenth of the function's memory (188 MiB of 3,008), 128 MiB outside
    Lambda. The declared prefixes (`SNAPLLM_PROMPT_PREFIXES`) are kept besides."""

    def prefix_cache_bytes(self, function_memory_mb: int | None) -> int:
        """The prefix cache's bound in bytes, for a function of ``function_memory_mb`` MB (None: unknown)."""
        return prefix_cache_bytes(self.prefix_cache_mb, function_memory_mb)

    @property
    def min_prompt_batch(self) -> int:
        """The fewest tokens a prompt's batch must hold for attention's result not to depend on how the
        prompt was split (0: any number): only flash attention over f16 values has kernels for different
        batch sizes."""
        return FLASH_ATTENTION_TILE_ROWS if self.flash_attention and self.cache_type_v == "f16" else 0

    @model_validator(mode="after")
    def _batches_run_the_tiled_kernel(self) -> EngineSettings:
        # Split evenly, a prompt's batches then hold half of n_batch or more (the engine's uniform batches).
        if self.n_batch < 2 * self.min_prompt_batch:
            raise ValueError(
                f"n_batch (SNAPLLM_N_BATCH) must be {2 * self.min_prompt_batch} or more with flash "
                "attention over f16 values, so that a prompt's batches all run one attention kernel"
            )
        return self
