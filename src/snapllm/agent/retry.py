"""Retry strategies, one per kind of step.

- ``inference``: throttles, timeouts and 5xx of the inference alias pass, and so may an answer cut at the
  invoke's deadline; back off and try again.
- ``storage``: S3 hiccups pass; a missing or forbidden object does not.
- ``tool``: a call to an idempotent tool: a server that cannot be reached, a broken-off call and a 5xx
  pass; back off and call again (the call carries the same idempotency key).
- ``tool_once``: a call to a tool that is not idempotent: only a server that could not be reached (nothing
  was sent) is retried; a call that broke off after it was sent may have taken effect and is not repeated.
- ``never``: pure bookkeeping steps whose failure is a bug or a bad input.

Permanent errors (:class:`~snapllm.agent.errors.PermanentAgentError`, e.g. a 4xx from the model or a
missing document) are never retried: only the listed transient types are::

    StepConfig(retry_strategy=RETRY["inference"], serdes=JsonSerDes())
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
