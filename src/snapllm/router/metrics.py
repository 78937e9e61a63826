"""CloudWatch metrics (EMF) of completions, shared by the router and the streaming function, so both
publish the same names and dimensions::

    metrics = EphemeralMetrics(namespace="snapllm", service="snapllm-stream")
    metrics.add_dimension("model", "smollm2-135m-instruct")
    add_completion_metrics(metrics, latency_ms=812.0, usage=usage, timings=timings)
    metrics.flush_metrics()
    record_error(namespace="snapllm", service="snapllm-stream", model="unknown",
                 error_type="InvalidRequestError", status=400)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from aws_lambda_powertools.metrics import MetricUnit, single_metric


class MetricSink(Protocol):
    def add_metric(self, name: str, unit: MetricUnit, value: float) -> None: ...


def add_completion_metrics(
    metrics: MetricSink,
    *,
    latency_ms: float,
    usage: Mapping[str, Any] | None = None,
    timings: Mapping[str, Any] | None = None,
) -> None:
    """One request's count and latency, and its tokens and speed when it generated."""
    metrics.add_metric("RequestCount", MetricUnit.Count, 1)
    metrics.add_metric("Latency", MetricUnit.Milliseconds, latency_ms)
    if usage is not None:
        metrics.add_metric("PromptTokens", MetricUnit.Count, usage.get("prompt_tokens", 0))
        metrics.add_metric("CompletionTokens", MetricUnit.Count, usage.get("completion_tokens", 0))
    if timings and "time_to_first_token_ms" in timings:
        metrics.add_metric("TimeToFirstToken", MetricUnit.Milliseconds, timings["time_to_first_token_ms"])
        metrics.add_metric("TokensPerSecond", MetricUnit.CountPerSecond, timings["tokens_per_second"])


def record_error(*, namespace: str, service: str, model: str, error_type: str, status: int) -> None:
    """An ``Errors`` data point of its own, so errors break down by type and status without multiplying
    the dimensions of every other metric."""
    with single_metric(
        name="Errors",
        unit=MetricUnit.Count,
        value=1,
        namespace=namespace,
        default_dimensions={"service": service, "model": model},
    ) as metric:
        metric.add_dimension("error_type", error_type)
        metric.add_dimension("status", str(status))
