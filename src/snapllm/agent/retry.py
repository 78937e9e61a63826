"""Retry strategies, one per kind of step: ``inference``, ``storage``, ``tool`` (an idempotent tool),
``tool_once`` (any other tool: retried only when nothing was sent) and ``never`` (bookkeeping).

    StepConfig(retry_strategy=RETRY["inference"], serdes=JsonSerDes())

Only the listed transient errors are retried, never a :class:`~snapllm.agent.errors.PermanentAgentError`;
docs/agents.md says what each kind retries.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_durable_execution_sdk_python.config import Duration
from aws_durable_execution_sdk_python.retries import (
    RetryDecision,
    RetryStrategyConfig,
    create_retry_strategy,
)

from snapllm.agent.errors import (
    ArtifactStoreError,
    InferenceDeadlineError,
    ToolServerUnreachableError,
    ToolTransportError,
)
from snapllm.errors import InferenceFailedError, InferenceThrottledError, InferenceTimeoutError

RetryStrategy = Callable[[Exception, int], RetryDecision]

INFERENCE_RETRY: RetryStrategy = create_retry_strategy(
    RetryStrategyConfig(
        max_attempts=5,
        initial_delay=Duration.from_seconds(2),
        max_delay=Duration.from_minutes(1),
        backoff_rate=2.0,
        # An inference step also reads its chunk from S3.
        retryable_error_types=[
            InferenceThrottledError,
            InferenceTimeoutError,
            InferenceDeadlineError,
            InferenceFailedError,
            ArtifactStoreError,
        ],
    )
)

STORAGE_RETRY: RetryStrategy = create_retry_strategy(
    RetryStrategyConfig(
        max_attempts=4,
        initial_delay=Duration.from_seconds(1),
        max_delay=Duration.from_seconds(20),
        backoff_rate=2.0,
        retryable_error_types=[ArtifactStoreError],
    )
)

TOOL_RETRY: RetryStrategy = create_retry_strategy(
    RetryStrategyConfig(
        max_attempts=4,
        initial_delay=Duration.from_seconds(1),
        max_delay=Duration.from_seconds(30),
        backoff_rate=2.0,
        # A built-in tool served through the same interface may read S3.
        retryable_error_types=[ToolServerUnreachableError, ToolTransportError, ArtifactStoreError],
    )
)

TOOL_ONCE_RETRY: RetryStrategy = create_retry_strategy(
    RetryStrategyConfig(
        max_attempts=4,
        initial_delay=Duration.from_seconds(1),
        max_delay=Duration.from_seconds(30),
        backoff_rate=2.0,
        retryable_error_types=[ToolServerUnreachableError],
    )
)

NEVER_RETRY: RetryStrategy = create_retry_strategy(RetryStrategyConfig(max_attempts=1))

RETRY: dict[str, RetryStrategy] = {
    "inference": INFERENCE_RETRY,
    "storage": STORAGE_RETRY,
    "tool": TOOL_RETRY,
    "tool_once": TOOL_ONCE_RETRY,
    "never": NEVER_RETRY,
}
