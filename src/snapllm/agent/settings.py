"""Settings of the agent function (:class:`AgentSettings`), read from ``SNAPLLM_AGENT_*`` variables
(:class:`AgentEnvironment`).

``template.yaml`` sets them from stack parameters::

    settings = AgentSettings.from_env()
    settings.state_budget_bytes    # 65536 unless SNAPLLM_AGENT_STATE_BUDGET_BYTES says otherwise
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from snapllm.environment import JSON_TEXT, EnvironmentSettings, Settings
from snapllm.errors import ConfigurationError

KiB = 1024
# The service rejects a checkpointed operation result over 256 KB; the budget stays well below that so
# the envelope the SDK adds around map/parallel results and JSON escaping can never push a value over.
SERVICE_OPERATION_LIMIT_BYTES = 256 * KiB
# Chunks a document may be split into for summaries, and tool calls a plan may make: both bound a run's cost.
MAX_CHUNKS_PER_DOCUMENT = 8
MAX_TOOL_CALLS = 8
# The agent's part of its artifacts bucket, unless SNAPLLM_AGENT_ARTIFACTS_PREFIX says otherwise.
ARTIFACTS_PREFIX = "agent/"


class McpServerConfig(BaseModel):
    """One MCP server the agent takes tools from (an entry of ``SNAPLLM_AGENT_MCP_SERVERS``)::

        {"name": "docs", "url": "https://gw.example.com/mcp", "auth": "iam", "region": "us-east-1",
         "idempotent": ["search"], "needs_approval": ["open_ticket"]}

    ``auth``: ``none``; ``iam`` signs each request with the function's own credentials (SigV4, signing
    name ``service``: an AWS-hosted gateway such as Bedrock AgentCore Gateway); ``bearer`` sends the API
    key kept in the Secrets Manager secret ``secret_arn`` (the secret string, or JSON with ``api_key``).
    ``tools`` limits the server's tools the agent offers the model to those named (default: all).
    ``idempotent`` names tools that may be called again after a call broke off (as the server's
    ``idempotentHint``/``readOnlyHint`` annotations do); ``needs_approval`` names tools a person approves,
    call by call, before they run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,24}$")
    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048)
    auth: Literal["none", "iam", "bearer"] = "none"
    secret_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:secretsmanager:[^\s]+$")
    region: str | None = None
    service: str = "bedrock-agentcore"
    tools: tuple[str, ...] = ()
    idempotent: tuple[str, ...] = ()
    needs_approval: tuple[str, ...] = ()
    timeout_s: float = Field(30.0, gt=0, le=900)

    @model_validator(mode="after")
    def _auth_has_what_it_needs(self) -> McpServerConfig:
        if self.auth == "bearer" and not self.secret_arn:
            raise ValueError(f"MCP server {self.name!r}: auth 'bearer' needs secret_arn")
        if self.auth != "bearer" and self.secret_arn:
            raise ValueError(f"MCP server {self.name!r}: secret_arn is only for auth 'bearer'")
        return self


class AgentVariables(Settings):
    """The agent's settings a deployment sets, each from ``SNAPLLM_AGENT_`` and its name.

    ``artifacts_prefix`` is the only part of ``artifacts_bucket`` the agent may read or write: documents
    must live under ``{artifacts_prefix}documents/`` or similar, and offloaded state goes under
    ``{artifacts_prefix}runs/``.
    """

    artifacts_bucket: str = Field(min_length=1)
    """Bucket of the documents and of the state offloaded from checkpoints (the template sets it)."""
    artifacts_prefix: str = ARTIFACTS_PREFIX
    """The only part of the bucket the agent reads or writes: documents under it, offloaded state under
    `{prefix}runs/`."""
    inference_function: str | None = Field(None, json_schema_extra={"unset": "required"})
    """Qualified ARN of the inference alias the agent invokes (the template sets it)."""
    inference_endpoint_url: str | None = Field(None, json_schema_extra={"unset": "the region's Lambda API"})
    """Lambda API endpoint for invoking the inference alias. Unset on AWS; `make sam-local` points it at
    `sam local start-lambda`, since the durable emulator takes `AWS_ENDPOINT_URL_LAMBDA`."""
    state_budget_bytes: int = Field(64 * KiB, ge=512, lt=SERVICE_OPERATION_LIMIT_BYTES)
    """Largest step result the agent checkpoints, in bytes; larger results go to S3. Below the service's
    256 KiB per operation."""
    max_documents: int = Field(8, ge=1)
    """Most documents a run may name."""
    chunks_per_document: int = Field(2, ge=1, le=MAX_CHUNKS_PER_DOCUMENT)
    """Chunks a document larger than one chunk is split into for summaries, spread evenly over it (the
    `part` a `summarize_chunk` call names)."""
    max_tool_calls: int = Field(3, ge=1, le=MAX_TOOL_CALLS)
    """Most steps a plan may have, each one tool call: the bound on a run's tool calls."""
    chunk_bytes: int = Field(1200, ge=64)
    """Bytes of a document read for one chunk's summary."""
    excerpt_bytes: int = Field(2 * KiB, ge=64)
    """Bytes of a document's opening excerpt."""
    plan_max_tokens: int = Field(320, ge=1)
    """Tokens the model may generate for the plan (JSON: the steps, each a tool and its arguments)."""
    tool_call_max_tokens: int = Field(128, ge=1)
    """Tokens the model may generate for one tool call (its arguments)."""
    summary_max_tokens: int = Field(64, ge=1)
    """Tokens the model may generate per summary (a summary cut short ends at its last whole sentence)."""
    answer_max_tokens: int = Field(256, ge=1)
    """Tokens the model may generate for the answer: room for the two or three sentences it is asked for
    (an answer cut short ends at its last whole sentence)."""
    mcp_servers: Annotated[tuple[McpServerConfig, ...], JSON_TEXT] = Field(
        (), json_schema_extra={"unset": "no MCP servers"}
    )
    """MCP servers the agent takes tools from, over streamable HTTP: a JSON list of `{"name", "url", "auth":
    "none"|"iam"|"bearer", "secret_arn" (bearer), "region" and "service" (iam), "tools" (the tools offered;
    default all), "idempotent", "needs_approval" (tool names), "timeout_s"}` (the template's
    `AgentMcpServers`)."""

    @field_validator("artifacts_prefix")
    @classmethod
    def _prefix_is_a_folder(cls, prefix: str) -> str:
        return prefix if not prefix or prefix.endswith("/") else prefix + "/"

    @model_validator(mode="after")
    def _servers_named_once(self) -> Self:
        names = [server.name for server in self.mcp_servers]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"SNAPLLM_AGENT_MCP_SERVERS names a server twice: {names}")
        return self


class AgentSettings(AgentVariables):
    """Everything the agent function runs with: its variables, and what no deployment changes."""

    inference_timeout_s: float = Field(120.0, gt=0)
    """Longest an inference invoke may take, in seconds."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> AgentSettings:
        return cls(**dict(AgentEnvironment.from_env(env)))

    @property
    def runs_prefix(self) -> str:
        return f"{self.artifacts_prefix}runs/"


class AgentEnvironment(AgentVariables, EnvironmentSettings):
    """The agent function's variables, all ``SNAPLLM_AGENT_*``."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_AGENT_")


class AgentRoutesEnvironment(EnvironmentSettings):
    """The variable of the agent's HTTP routes (:mod:`snapllm.agent.routes`), which the router mounts."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_AGENT_")

    function_arn: str | None = Field(None, json_schema_extra={"unset": "`/v1/agent` unavailable"})
    """Qualified ARN of the agent alias that `/v1/agent/runs` starts runs on (the template sets it)."""
    artifacts_bucket: str | None = Field(None, json_schema_extra={"unset": "`/v1/agent` unavailable"})
    """Bucket where each run's execution ARN is kept, under `{prefix}runs/executions/` (the template sets
    it: the agent's bucket)."""
    artifacts_prefix: str = ARTIFACTS_PREFIX
    """The agent's prefix in that bucket (the template sets it)."""
