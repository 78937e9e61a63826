"""Wire the durable flow to Lambda: dependencies from the environment, a thin durable handler.

    handler = build_handler()      # all of functions/agent/app.py

Tests and the local runner pass their own (a local inference environment, the local S3)::

    handler = build_handler(lambda: AgentDependencies(settings, store, LocalInferenceClient(env)))
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import boto3
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.exceptions import DurableOperationError

from snapllm.agent.artifacts import ArtifactStore
from snapllm.agent.flow import AgentDependencies, agent_failure, run_agent
from snapllm.agent.mcp import McpToolSource
from snapllm.agent.settings import AgentSettings
from snapllm.agent.tools import BuiltinTools, ToolSource
from snapllm.errors import ConfigurationError
from snapllm.inference.client import LambdaInferenceClient

#: The run's log: each model call's prompt and cached tokens (:func:`snapllm.agent.flow.run_agent`).
LOGGER = logging.getLogger("snapllm.agent")


def tool_sources(settings: AgentSettings) -> tuple[ToolSource, ...]:
    """The built-in tools, then each configured MCP server's (``SNAPLLM_AGENT_MCP_SERVERS``)."""
    return (BuiltinTools(), *(McpToolSource(server) for server in settings.mcp_servers))


def dependencies_from_env() -> AgentDependencies:
    """Production wiring: the inference alias over Lambda ``Invoke`` and the artifacts bucket."""
    settings = AgentSettings.from_env()
    if settings.inference_function is None:
        raise ConfigurationError("SNAPLLM_AGENT_INFERENCE_FUNCTION must name the inference alias ARN")
    store = ArtifactStore(
        boto3.client("s3"), bucket=settings.artifacts_bucket, prefix=settings.artifacts_prefix
    )
    return AgentDependencies(
        settings=settings,
        store=store,
        # Agent steps are not behind API Gateway's 30 s, so a generation may take as long as the model needs.
        inference=LambdaInferenceClient(
            settings.inference_function,
            read_timeout_s=settings.inference_timeout_s,
            endpoint_url=settings.inference_endpoint_url,
        ),
        tools=tool_sources(settings),
    )


def build_handler(
    dependencies: Callable[[], AgentDependencies] = dependencies_from_env,
) -> Callable[[Any, Any], Any]:
    """A durable Lambda handler; dependencies are built on the first invoke and kept for the next."""
    deps = functools.cache(dependencies)

    @durable_execution
    def handler(event: Any, context: DurableContext) -> dict[str, Any]:
        context.set_logger(LOGGER)
        try:
            return run_agent(event, context, deps())
        except DurableOperationError as exc:
            # A failure inside a step or a map item reaches here wrapped in the operations' errors
            # (ChildContextError around StepError around it); the run fails with the agent's own error
            # instead, so its type says what went wrong, not where.
            failure = agent_failure(exc)
            if failure is None:
                raise
            raise failure from None

    return handler
