"""Retry strategies, one per kind of step.

- ``inference``: throttles, timeouts and 5xx of the inference alias pass; back off and try again.
- ``storage``: S3 hiccups pass; a missing or forbidden object does not.
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

from snapllm.agent.errors import ArtifactStoreError
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

NEVER_RETRY: RetryStrategy = create_retry_strategy(RetryStrategyConfig(max_attempts=1))

RETRY: dict[str, RetryStrategy] = {
    "inference": INFERENCE_RETRY,
    "storage": STORAGE_RETRY,
    "never": NEVER_RETRY,
}
