"""Settings of the inference function, read once from environment variables at init.

Every setting has a ``SNAPLLM_`` variable; ``template.yaml`` sets them from stack parameters::

    settings = InferenceSettings.from_env()
    settings.model.bucket, settings.loader.part_size, settings.engine.n_ctx
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from snapllm.errors import ConfigurationError

MiB = 1024 * 1024
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.001) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not value >= minimum:  # also refuses nan
        raise ConfigurationError(f"{name} must be at least {minimum}, got {value}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(env, name)
    if raw is None:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


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
        bucket = _get(env, "SNAPLLM_MODEL_BUCKET")
        key = _get(env, "SNAPLLM_MODEL_KEY")
        if bucket is None or key is None:
            raise ConfigurationError("SNAPLLM_MODEL_BUCKET and SNAPLLM_MODEL_KEY must name the model object")
        digest = _get(env, "SNAPLLM_MODEL_SHA256")
        if digest is not None:
            digest = digest.lower()
            if not _SHA256_HEX.match(digest):
                raise ConfigurationError("SNAPLLM_MODEL_SHA256 must be 64 hex digits")
        name = _get(env, "SNAPLLM_MODEL_NAME") or key.rsplit("/", 1)[-1].removesuffix(".gguf")
        return cls(bucket=bucket, key=key, sha256=digest, name=name)


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
        return cls(
            part_size=_int(env, "SNAPLLM_S3_PART_SIZE_MB", cls.part_size // MiB) * MiB,
            concurrency=_int(env, "SNAPLLM_S3_CONCURRENCY", cls.concurrency),
            max_attempts=_int(env, "SNAPLLM_S3_MAX_ATTEMPTS", cls.max_attempts),
            connect_timeout_s=_float(env, "SNAPLLM_S3_CONNECT_TIMEOUT_S", cls.connect_timeout_s),
            read_timeout_s=_float(env, "SNAPLLM_S3_READ_TIMEOUT_S", cls.read_timeout_s),
        )


@dataclass(frozen=True)
class EngineSettings:
    """llama.cpp and generation limits."""

    n_ctx: int = 2048
    max_tokens: int = 512
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
        threads = _get(env, "SNAPLLM_THREADS")
        return cls(
            n_ctx=_int(env, "SNAPLLM_N_CTX", cls.n_ctx, minimum=16),
            max_tokens=_int(env, "SNAPLLM_MAX_TOKENS", cls.max_tokens),
            threads=_int(env, "SNAPLLM_THREADS", 1) if threads is not None else None,
            n_batch=_int(env, "SNAPLLM_N_BATCH", cls.n_batch),
            deadline_margin_ms=_int(env, "SNAPLLM_DEADLINE_MARGIN_MS", cls.deadline_margin_ms, minimum=0),
            warmup_tokens=_int(env, "SNAPLLM_WARMUP_TOKENS", cls.warmup_tokens, minimum=0),
            verbose=_bool(env, "SNAPLLM_LLAMA_VERBOSE", cls.verbose),
            repack_weights=_bool(env, "SNAPLLM_REPACK_WEIGHTS", cls.repack_weights),
        )


@dataclass(frozen=True)
class InferenceSettings:
    """Everything the inference function reads from its environment."""

    model: ModelSource
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> InferenceSettings:
        return cls(
            model=ModelSource.from_env(env),
            loader=LoaderSettings.from_env(env),
            engine=EngineSettings.from_env(env),
        )
