"""Settings of the agent function, read from ``SNAPLLM_AGENT_*`` environment variables.

``template.yaml`` sets them from stack parameters::

    settings = AgentSettings.from_env()
    settings.state_budget_bytes    # 65536 unless SNAPLLM_AGENT_STATE_BUDGET_BYTES says otherwise
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from snapllm.config import _get, _int
from snapllm.errors import ConfigurationError

KiB = 1024
# The service rejects a checkpointed operation result over 256 KB; the budget stays well below that so
# the envelope the SDK adds around map/parallel results and JSON escaping can never push a value over.
SERVICE_OPERATION_LIMIT_BYTES = 256 * KiB


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent reads from its environment.

    ``artifacts_prefix`` is the only part of ``artifacts_bucket`` the agent may read or write: documents
    must live under ``{artifacts_prefix}documents/`` or similar, and offloaded state goes under
    ``{artifacts_prefix}runs/``.
    """

    artifacts_bucket: str
    artifacts_prefix: str = "agent/"
    inference_function_arn: str | None = None
    state_budget_bytes: int = 64 * KiB
    max_documents: int = 8
    chunks_per_document: int = 2
    chunk_bytes: int = 1200
    excerpt_bytes: int = 2 * KiB
    plan_max_tokens: int = 48
    summary_max_tokens: int = 40
    answer_max_tokens: int = 64
    inference_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.state_budget_bytes >= SERVICE_OPERATION_LIMIT_BYTES:
            raise ConfigurationError(
                "SNAPLLM_AGENT_STATE_BUDGET_BYTES must stay below the service's "
                f"{SERVICE_OPERATION_LIMIT_BYTES} bytes per operation, got {self.state_budget_bytes}"
            )
        if self.artifacts_prefix and not self.artifacts_prefix.endswith("/"):
            object.__setattr__(self, "artifacts_prefix", self.artifacts_prefix + "/")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> AgentSettings:
        bucket = _get(env, "SNAPLLM_AGENT_ARTIFACTS_BUCKET")
        if bucket is None:
            raise ConfigurationError("SNAPLLM_AGENT_ARTIFACTS_BUCKET must name the artifacts bucket")
        return cls(
            artifacts_bucket=bucket,
            artifacts_prefix=_get(env, "SNAPLLM_AGENT_ARTIFACTS_PREFIX") or cls.artifacts_prefix,
            inference_function_arn=_get(env, "SNAPLLM_AGENT_INFERENCE_FUNCTION"),
            state_budget_bytes=_int(
                env, "SNAPLLM_AGENT_STATE_BUDGET_BYTES", cls.state_budget_bytes, minimum=512
            ),
            max_documents=_int(env, "SNAPLLM_AGENT_MAX_DOCUMENTS", cls.max_documents),
            chunks_per_document=_int(env, "SNAPLLM_AGENT_CHUNKS_PER_DOCUMENT", cls.chunks_per_document),
            chunk_bytes=_int(env, "SNAPLLM_AGENT_CHUNK_BYTES", cls.chunk_bytes, minimum=64),
            excerpt_bytes=_int(env, "SNAPLLM_AGENT_EXCERPT_BYTES", cls.excerpt_bytes, minimum=64),
            plan_max_tokens=_int(env, "SNAPLLM_AGENT_PLAN_MAX_TOKENS", cls.plan_max_tokens),
            summary_max_tokens=_int(env, "SNAPLLM_AGENT_SUMMARY_MAX_TOKENS", cls.summary_max_tokens),
            answer_max_tokens=_int(env, "SNAPLLM_AGENT_ANSWER_MAX_TOKENS", cls.answer_max_tokens),
        )

    @property
    def runs_prefix(self) -> str:
        return f"{self.artifacts_prefix}runs/"
