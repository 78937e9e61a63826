"""Settings of the inference function, read once from environment variables at init.

Every setting has a ``SNAPLLM_`` variable, declared (with its default, range and description) by
:class:`InferenceEnvironment`; ``template.yaml`` sets them from stack parameters::

    settings = InferenceSettings.from_env()
    settings.model.bucket, settings.loader.part_size, settings.engine.n_ctx

The settings classes themselves are plain values: constructing one reads no environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field, field_validator

from snapllm.environment import EnvironmentSettings
from snapllm.errors import ConfigurationError

MiB = 1024 * 1024
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
    """How the model is fetched: ranged GETs of ``part_size`` bytes, ``concurrency`` at a time.

    S3 serves one connection at tens of MB/s, so on AWS many parts in flight are what make a large model
    arrive quickly; ``snapllm bench coldstart`` measures the trade-off against any endpoint.

    **How long a failing load takes.** The HEAD and each part get ``max_attempts`` attempts (A). An
    attempt that moves no byte ends within ``connect_timeout_s + read_timeout_s`` (C + R): a refused or
    reset connection or an error status ends it at once, a connection that stalls (no byte for R seconds,
    before or after the response headers) ends it when the read times out, and a connection that cannot
    be opened ends it after C. Retry k (k = 1 .. A-1) first sleeps a random fraction of
    ``backoff_base_s * 2**k`` (b). So one part (or the HEAD) gives up within
    :attr:`part_failure_bound_s`, ``A * (C + R) + b * (2**A - 2)``, plus the time the bytes its attempts
    did receive took to arrive (each resumes where the last broke off).

    Parts run ``concurrency`` at a time and the first part that gives up fails the load: the parts still
    in flight are told to stop, and each stops within one more attempt's time (C + R; one sleeping
    between attempts wakes at once). So a load that fails for good raises within
    :attr:`failure_bound_s`, ``part_failure_bound_s + C + R``, after the healthy bytes before the failing
    part have arrived. The defaults give 181 s and 216 s. A connection that keeps sending, however
    slowly, is not a failure and has no bound here: the function timeout is the limit for it.
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
        return InferenceEnvironment.from_env(env).inference_settings()


class InferenceEnvironment(EnvironmentSettings):
    """The inference function's variables: the model source, the loader and the engine.

    The streaming function loads its model from the same variables. ``SNAPLLM_MODEL_BUCKET`` and
    ``SNAPLLM_MODEL_KEY`` are checked by :meth:`model_source`, so the loader's and the engine's settings
    can be read on their own (``snapllm bench``, tests).
    """

    model_bucket: str | None = Field(
        None,
        description="S3 bucket of the GGUF model object (the template sets it).",
        json_schema_extra={"unset": "required"},
    )
    model_key: str | None = Field(
        None,
        description="Key of the GGUF model object in the bucket (the template sets it).",
        json_schema_extra={"unset": "required"},
    )
    model_sha256: str | None = Field(
        None,
        description="Expected SHA-256 of the model (64 hex digits); with neither it nor the object's "
        "`sha256` metadata, the download is not verified.",
        json_schema_extra={"unset": "object metadata `sha256`"},
    )
    model_name: str | None = Field(
        None,
        description="Model name in responses and for routing.",
        json_schema_extra={"unset": "key's file name"},
    )
    s3_part_size_mb: int = Field(
        LoaderSettings.part_size // MiB, ge=1, description="Size of each ranged GET of the model, in MiB."
    )
    s3_concurrency: int = Field(
        LoaderSettings.concurrency, ge=1, description="Ranged GETs of the model in flight at once."
    )
    s3_max_attempts: int = Field(
        LoaderSettings.max_attempts,
        ge=1,
        description="Attempts per part (a retry resumes after the bytes already written).",
    )
    s3_connect_timeout_s: float = Field(
        LoaderSettings.connect_timeout_s, ge=0.001, description="Connect timeout of S3 requests, in seconds."
    )
    s3_read_timeout_s: float = Field(
        LoaderSettings.read_timeout_s,
        ge=0.001,
        description="Longest a read may wait for a byte before the part is retried, in seconds.",
    )
    n_ctx: int = Field(EngineSettings.n_ctx, ge=16, description="llama.cpp context size, in tokens.")
    n_batch: int = Field(EngineSettings.n_batch, ge=1, description="llama.cpp batch size, in tokens.")
    max_tokens: int = Field(
        EngineSettings.max_tokens, ge=1, description="Largest `max_tokens` a request may ask for."
    )
    max_prompt_chars: int = Field(
        EngineSettings.max_prompt_chars,
        ge=1,
        description="Longest prompt (characters over all messages) accepted before tokenizing.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Generation threads; unset, the CPUs really available (affinity mask and cgroup quota).",
        json_schema_extra={"unset": "CPUs really available"},
    )
    deadline_margin_ms: int = Field(
        EngineSettings.deadline_margin_ms,
        ge=0,
        description="Time kept back before the invoke's deadline, in milliseconds.",
    )
    warmup_tokens: int = Field(
        EngineSettings.warmup_tokens, ge=0, description="Tokens generated by the before-snapshot warm-up."
    )
    llama_verbose: bool = Field(EngineSettings.verbose, description="llama.cpp's own logging, to stderr.")
    repack_weights: bool = Field(
        EngineSettings.repack_weights,
        description="Let llama.cpp repack Q4_0 / Q4_K weights for the CPU: faster on Graviton, but a second "
        "copy in RAM and in the snapshot.",
    )

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
        return EngineSettings(
            n_ctx=self.n_ctx,
            max_tokens=self.max_tokens,
            max_prompt_chars=self.max_prompt_chars,
            threads=self.threads,
            n_batch=self.n_batch,
            deadline_margin_ms=self.deadline_margin_ms,
            warmup_tokens=self.warmup_tokens,
            verbose=self.llama_verbose,
            repack_weights=self.repack_weights,
        )

    def inference_settings(self) -> InferenceSettings:
        return InferenceSettings(
            model=self.model_source(), loader=self.loader_settings(), engine=self.engine_settings()
        )
