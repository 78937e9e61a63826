"""Settings of the inference function, read once from environment variables at init.

:class:`InferenceEnvironment` declares the ``SNAPLLM_`` variables, which ``template.yaml`` sets from stack
parameters; the other classes are plain values, built without reading any environment::

    settings = InferenceSettings.from_env()
    settings.model.bucket, settings.loader.part_size, settings.engine.n_ctx
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

from pydantic import Field, field_validator

from snapllm.environment import EnvironmentSettings
from snapllm.errors import ConfigurationError

MiB = 1024 * 1024
#: What the after-restore hook faults in (:mod:`snapllm.prefault`).
PrefaultMode = Literal["none", "weights", "all"]
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


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

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ModelSource:
        return InferenceEnvironment.from_env(env).model_source()


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

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LoaderSettings:
        return InferenceEnvironment.from_env(env).loader_settings()


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
    # What the after-restore hook faults in before the first request (snapllm.prefault).
    prefault: PrefaultMode = "all"
    # One thread: two measured slower on the restore (0.31 s against 0.17 s, SmolLM2 on 2 cores) and left
    # the first request's generation 0.1-0.2 s slower than a warm one's; one thread left no gap.
    prefault_threads: int = 1
    prefault_budget_ms: int = 5000

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> EngineSettings:
        return InferenceEnvironment.from_env(env).engine_settings()


@dataclass(frozen=True)
class InferenceSettings:
    """Everything the inference function reads from its environment."""

    model: ModelSource
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> InferenceSettings:
        variables = InferenceEnvironment.from_env(env)
        return cls(variables.model_source(), variables.loader_settings(), variables.engine_settings())


class InferenceEnvironment(EnvironmentSettings):
    """The inference function's variables (the streaming function loads its model from them too).

    The model's bucket and key are checked by :meth:`model_source` only, so the loader's and the engine's
    settings can be read without them (``snapllm bench``, tests). Defaults are the value classes'.
    """

    model_bucket: str | None = Field(None, json_schema_extra={"unset": "required"})
    """S3 bucket of the GGUF model object (the template sets it)."""
    model_key: str | None = Field(None, json_schema_extra={"unset": "required"})
    """Key of the GGUF model object in the bucket (the template sets it)."""
    model_sha256: str | None = Field(None, json_schema_extra={"unset": "object metadata `sha256`"})
    """Expected SHA-256 of the model (64 hex digits); with neither it nor the object's `sha256` metadata,
    the download is not verified."""
    model_name: str | None = Field(None, json_schema_extra={"unset": "key's file name"})
    """Model name in responses and for routing."""
    s3_part_size_mb: int = Field(LoaderSettings.part_size // MiB, ge=1)
    """Size of each ranged GET of the model, in MiB."""
    s3_concurrency: int = Field(LoaderSettings.concurrency, ge=1)
    """Ranged GETs of the model in flight at once."""
    s3_max_attempts: int = Field(LoaderSettings.max_attempts, ge=1)
    """Attempts per part (a retry resumes after the bytes already written)."""
    s3_connect_timeout_s: float = Field(LoaderSettings.connect_timeout_s, ge=0.001)
    """Connect timeout of S3 requests, in seconds."""
    s3_read_timeout_s: float = Field(LoaderSettings.read_timeout_s, ge=0.001)
    """Longest a read may wait for a byte before the part is retried, in seconds."""
    # Named as EngineSettings' fields, which engine_settings copies by name (hence verbose's alias).
    n_ctx: int = Field(EngineSettings.n_ctx, ge=16)
    """llama.cpp context size, in tokens."""
    n_batch: int = Field(EngineSettings.n_batch, ge=1)
    """llama.cpp batch size, in tokens."""
    max_tokens: int = Field(EngineSettings.max_tokens, ge=1)
    """Largest `max_tokens` a request may ask for."""
    max_prompt_chars: int = Field(EngineSettings.max_prompt_chars, ge=1)
    """Longest prompt (characters over all messages) accepted before tokenizing."""
    threads: int | None = Field(
        EngineSettings.threads, ge=1, json_schema_extra={"unset": "CPUs really available"}
    )
    """Generation threads; unset, the CPUs really available (affinity mask and cgroup quota)."""
    deadline_margin_ms: int = Field(EngineSettings.deadline_margin_ms, ge=0)
    """Time kept back before the invoke's deadline, in milliseconds."""
    warmup_tokens: int = Field(EngineSettings.warmup_tokens, ge=0)
    """Tokens generated by the before-snapshot warm-up."""
    verbose: bool = Field(EngineSettings.verbose, validation_alias="SNAPLLM_LLAMA_VERBOSE")
    """llama.cpp's own logging, to stderr."""
    repack_weights: bool = EngineSettings.repack_weights
    """Let llama.cpp repack Q4_0 / Q4_K weights for the CPU: faster on Graviton, but a second copy in RAM
    and in the snapshot."""
    prefault: PrefaultMode = EngineSettings.prefault
    """Memory the after-restore hook faults in, so the first request does not: `none`, `weights` (the
    model's mapping) or `all` (the weights and the process's private memory: compute buffers, KV cache,
    heap). Its time counts toward the restore, which Lambda limits to 10 s."""
    prefault_threads: int = Field(EngineSettings.prefault_threads, ge=1)
    """Threads of the after-restore prefault. More may fault a multi-GB model in sooner on 6 vCPUs; check
    with `snapllm bench aws` that the first request does not pay for them."""
    prefault_budget_ms: int = Field(EngineSettings.prefault_budget_ms, ge=0, le=9000)
    """Longest the after-restore prefault runs, in milliseconds; what is left then, the first request
    faults in. Lambda fails a restore whose hooks take over 10 s."""

    @field_validator("model_sha256")
    @classmethod
    def _sha256_hex(cls, digest: str | None) -> str | None:
        if digest is not None and not _SHA256_HEX.match(digest := digest.lower()):
            raise ValueError("must be 64 hex digits")
        return digest

    def model_source(self) -> ModelSource:
        if self.model_bucket is None or self.model_key is None:
            raise ConfigurationError("SNAPLLM_MODEL_BUCKET and SNAPLLM_MODEL_KEY must name the model object")
        name = self.model_name or self.model_key.rsplit("/", 1)[-1].removesuffix(".gguf")
        return ModelSource(bucket=self.model_bucket, key=self.model_key, sha256=self.model_sha256, name=name)

    def loader_settings(self) -> LoaderSettings:
        return LoaderSettings(
            part_size=self.s3_part_size_mb * MiB,
            concurrency=self.s3_concurrency,
            max_attempts=self.s3_max_attempts,
            connect_timeout_s=self.s3_connect_timeout_s,
            read_timeout_s=self.s3_read_timeout_s,
        )

    def engine_settings(self) -> EngineSettings:
        return EngineSettings(**self.model_dump(include={f.name for f in fields(EngineSettings)}))
