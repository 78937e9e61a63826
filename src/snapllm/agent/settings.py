"""Settings of the agent function, read from ``SNAPLLM_AGENT_*`` variables (:class:`AgentEnvironment`).

``template.yaml`` sets them from stack parameters::

    settings = AgentSettings.from_env()
    settings.state_budget_bytes    # 65536 unless SNAPLLM_AGENT_STATE_BUDGET_BYTES says otherwise
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from snapllm.environment import EnvironmentSettings
from snapllm.errors import ConfigurationError

KiB = 1024
# The service rejects a checkpointed operation result over 256 KB; the budget stays well below that so
# the envelope the SDK adds around map/parallel results and JSON escaping can never push a value over.
SERVICE_OPERATION_LIMIT_BYTES = 256 * KiB
# Chunks a document may be split into for summaries, and tool calls a plan may make: both bound a run's cost.
MAX_CHUNKS_PER_DOCUMENT = 8
MAX_TOOL_CALLS = 8


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
    inference_endpoint_url: str | None = None
    state_budget_bytes: int = 64 * KiB
    max_documents: int = 8
    chunks_per_document: int = 2
    chunk_bytes: int = 1200
    excerpt_bytes: int = 2 * KiB
    max_tool_calls: int = 4
    plan_max_tokens: int = 320
    tool_call_max_tokens: int = 96
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
        return AgentEnvironment.from_env(env).agent_settings()

    @property
    def runs_prefix(self) -> str:
        return f"{self.artifacts_prefix}runs/"


class AgentEnvironment(EnvironmentSettings):
    """The agent function's variables, all ``SNAPLLM_AGENT_*``, named as :class:`AgentSettings`' fields."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_AGENT_")

    artifacts_bucket: str = Field(min_length=1)
    """Bucket of the documents and of the state offloaded from checkpoints (the template sets it)."""
    artifacts_prefix: str = AgentSettings.artifacts_prefix
    """The only part of the bucket the agent reads or writes: documents under it, offloaded state under
    `{prefix}runs/`."""
    inference_function: str | None = Field(None, json_schema_extra={"unset": "required"})
    """Qualified ARN of the inference alias the agent invokes (the template sets it)."""
    inference_endpoint_url: str | None = Field(None, json_schema_extra={"unset": "the region's Lambda API"})
    """Lambda API endpoint for invoking the inference alias. Unset on AWS; `make sam-local` points it at
    `sam local start-lambda`, since the durable emulator takes `AWS_ENDPOINT_URL_LAMBDA`."""
    state_budget_bytes: int = Field(
        AgentSettings.state_budget_bytes, ge=512, lt=SERVICE_OPERATION_LIMIT_BYTES
    )
    """Largest step result the agent checkpoints, in bytes; larger results go to S3. Below the service's
    256 KiB per operation."""
    max_documents: int = Field(AgentSettings.max_documents, ge=1)
    """Most documents a run may name."""
    chunks_per_document: int = Field(AgentSettings.chunks_per_document, ge=1, le=MAX_CHUNKS_PER_DOCUMENT)
    """Chunks a document larger than one chunk is split into for summaries, spread evenly over it (the
    `part` a `summarize_chunk` call names)."""
    max_tool_calls: int = Field(AgentSettings.max_tool_calls, ge=1, le=MAX_TOOL_CALLS)
    """Most steps a plan may have, each one tool call: the bound on a run's tool calls."""
    chunk_bytes: int = Field(AgentSettings.chunk_bytes, ge=64)
    """Bytes of a document read for one chunk's summary."""
    excerpt_bytes: int = Field(AgentSettings.excerpt_bytes, ge=64)
    """Bytes of a document's opening excerpt."""
    plan_max_tokens: int = Field(AgentSettings.plan_max_tokens, ge=1)
    """Tokens the model may generate for the plan (JSON: the steps, each a tool and its arguments)."""
    tool_call_max_tokens: int = Field(AgentSettings.tool_call_max_tokens, ge=1)
    """Tokens the model may generate for one tool call (its arguments)."""
    summary_max_tokens: int = Field(AgentSettings.summary_max_tokens, ge=1)
    """Tokens the model may generate per summary."""
    answer_max_tokens: int = Field(AgentSettings.answer_max_tokens, ge=1)
    """Tokens the model may generate for the answer."""

    def agent_settings(self) -> AgentSettings:
        values = self.model_dump(exclude={"inference_function"})
        return AgentSettings(**values, inference_function_arn=self.inference_function)


class AgentRoutesEnvironment(EnvironmentSettings):
    """The variable of the agent's HTTP routes (:mod:`snapllm.agent.routes`), which the router mounts."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_AGENT_")

    function_arn: str | None = Field(None, json_schema_extra={"unset": "`/v1/agent` unavailable"})
    """Qualified ARN of the agent alias that `/v1/agent/runs` starts runs on (the template sets it)."""
