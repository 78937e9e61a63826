"""CloudWatch metrics (EMF) of completions, shared by the router and the streaming function, so both
publish the same names and dimensions.

The router adds them to its Powertools ``Metrics`` (flushed by ``log_metrics``); the streaming function,
which has no Lambda handler to flush them, publishes each request's on its own::

    metrics = CompletionMetrics(namespace="snapllm", service="snapllm-stream", model="smollm2")
    ...
    metrics.succeeded(generation)          # or metrics.failed(error)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from snapllm.errors import RequestError
from snapllm.protocol.requests import Generation


class MetricSink(Protocol):
    def add_metric(self, name: str, unit: MetricUnit, value: float) -> None: ...
    def add_dimension(self, name: str, value: str) -> None: ...
    def add_dimensions(self, **dimensions: str) -> None: ...
    def add_metadata(self, key: str, value: Any) -> None: ...


def request_features(request: Any) -> dict[str, str]:
    """What kind of output a chat request asked for, as EMF properties: ``response_format`` (text,
    json_object, json_schema) and ``tool_choice`` (none when no tools were sent). Properties, not
    dimensions: they can be queried in Logs Insights without multiplying every metric's cost."""
    form = getattr(request, "response_format", None)
    tools = getattr(request, "tools", None)
    choice = getattr(request, "tool_choice", None)
    if not tools:
        tool_choice = "none"
    elif isinstance(choice, str):
        tool_choice = choice
    else:
        tool_choice = "named" if choice is not None else "auto"
    return {"response_format": form.type if form is not None else "text", "tool_choice": tool_choice}


def add_completion_metrics(
    metrics: MetricSink,
    *,
    service: str,
    model: str,
    latency_ms: float,
    usage: Mapping[str, Any] | None = None,
    timings: Mapping[str, Any] | None = None,
    features: Mapping[str, str] | None = None,
) -> None:
    """One request's count and latency, and its tokens (those of its prompt's cached prefix too: a cache
    hit or miss) and speed when it generated; ``features`` (see
    :func:`request_features`) are added as properties.

    Each data point is published per model and, as a second dimension set, per service alone: alarms and
    the dashboard need one metric for the whole API, whatever models the routing table holds.
    """
    metrics.add_dimension("model", model)
    metrics.add_dimensions(service=service)
    metrics.add_metric("RequestCount", MetricUnit.Count, 1)
    for key, value in (features or {}).items():
        metrics.add_metadata(key, value)
    metrics.add_metric("Latency", MetricUnit.Milliseconds, latency_ms)
    if usage is not None:  # a completion's usage, or a response's (input_tokens, output_tokens)
        prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
        completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
        metrics.add_metric("PromptTokens", MetricUnit.Count, prompt)
        metrics.add_metric("CompletionTokens", MetricUnit.Count, completion)
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        if details is not None:
            # The prompt prefix taken from the engine's cache (the live sequence or a saved state): a hit
            # saved that many tokens' evaluation.
            cached = details.get("cached_tokens", 0)
            metrics.add_metric("PromptCacheHits", MetricUnit.Count, int(cached > 0))
            metrics.add_metric("PromptCacheMisses", MetricUnit.Count, int(cached == 0))
            metrics.add_metric("CachedPromptTokens", MetricUnit.Count, cached)
    if timings and "time_to_first_token_ms" in timings:
        metrics.add_metric("TimeToFirstToken", MetricUnit.Milliseconds, timings["time_to_first_token_ms"])
        metrics.add_metric("TokensPerSecond", MetricUnit.CountPerSecond, timings["tokens_per_second"])


def status_class(status: int) -> str:
    """``503`` -> ``"5xx"``: the ``status_class`` dimension of ``Errors``, which the 5xx-rate alarm reads."""
    return f"{status // 100}xx"


def record_error(*, namespace: str, service: str, model: str, error_type: str, status: int) -> None:
    """An ``Errors`` data point of its own, so errors break down by type and status without multiplying
    the dimensions of every other metric. Besides the full breakdown, it is published per service and
    status (the dashboard) and per service and status class (the 5xx-rate alarm)."""
    metric = EphemeralMetrics(namespace=namespace, service=service)
    metric.add_dimension("model", model)
    metric.add_dimension("error_type", error_type)
    metric.add_dimension("status", str(status))
    metric.add_dimensions(service=service, status=str(status))
    metric.add_dimensions(service=service, status_class=status_class(status))
    metric.add_metric("Errors", MetricUnit.Count, 1)
    metric.flush_metrics()


class CompletionMetrics:
    """The metrics of one completion request, published once when its response ends."""

    def __init__(self, *, namespace: str, service: str, model: str) -> None:
        self.namespace = namespace
        self.service = service
        self.model = model
        self.started = time.perf_counter()
        self.features: dict[str, str] | None = None

    def succeeded(self, generation: Generation) -> None:
        self._publish(usage=generation.usage(), timings=generation.timings.as_dict())

    def failed(self, error: RequestError, *, status: int | None = None) -> None:
        """``status`` is what the client saw: for a stream that had already started, a 200."""
        self._publish()
        record_error(
            namespace=self.namespace,
            service=self.service,
            model=self.model,
            error_type=type(error).__name__,
            status=error.status_code if status is None else status,
        )

    def _publish(
        self, *, usage: Mapping[str, Any] | None = None, timings: Mapping[str, Any] | None = None
    ) -> None:
        metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
        latency_ms = (time.perf_counter() - self.started) * 1000.0
        add_completion_metrics(
            metrics,
            service=self.service,
            model=self.model,
            latency_ms=latency_ms,
            usage=usage,
            timings=timings,
            features=self.features,
        )
        metrics.flush_metrics()
