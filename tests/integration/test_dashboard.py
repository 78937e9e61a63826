"""The dashboard and the alarms in template.yaml name only metrics that exist.

A metric exists when the code emits it (EMF lines captured from ``snapllm local serve`` answering real
requests through the router and the streaming function, with the template's own environment) or when one
of the template's metric filters derives it from Lambda's platform reports. CloudWatch itself only runs on
AWS: the filters are checked here against report records in the shape AWS documents for the JSON log format
(``{"type": "platform.report", "record": {"metrics": {...}}}``), with an evaluator of the pattern subset
the template uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from snapllm import errors
from snapllm.protocol.metrics import status_class
from snapllm_dev import sam
from snapllm_dev.local.s3 import free_port
from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL, SERVE_ENV, ServeProcess

pytestmark = pytest.mark.slow

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "seed": 1}

# Report records as Lambda writes them with LogFormat JSON: a restored SnapStart environment's first
# invoke, and an on-demand one's.
RESTORED_REPORT = {
    "time": "2026-11-24T10:00:00.000Z",
    "type": "platform.report",
    "record": {
        "requestId": "6d0c5a4e-0b6e-4a43-9a5b-1f7d5b1c2a10",
        "metrics": {
            "durationMs": 412.7,
            "billedDurationMs": 413,
            "memorySizeMB": 10240,
            "maxMemoryUsedMB": 612,
            "restoreDurationMs": 188.4,
            "billedRestoreDurationMs": 97,
        },
        "status": "success",
    },
}
INITIALIZED_REPORT = {
    "time": "2026-11-24T10:00:01.000Z",
    "type": "platform.report",
    "record": {
        "requestId": "0b3f9c52-91c4-4f7e-8d7a-2f1e6c9d4b22",
        "metrics": {
            "durationMs": 395.2,
            "billedDurationMs": 396,
            "memorySizeMB": 10240,
            "maxMemoryUsedMB": 640,
            "initDurationMs": 1432.9,
        },
        "status": "success",
    },
}
WARM_REPORT = {
    "time": "2026-11-24T10:00:02.000Z",
    "type": "platform.report",
    "record": {
        "requestId": "9a1e2d3c-4b5a-4c6d-8e7f-0a1b2c3d4e5f",
        "metrics": {
            "durationMs": 366.1,
            "billedDurationMs": 367,
            "memorySizeMB": 10240,
            "maxMemoryUsedMB": 612,
        },
        "status": "success",
    },
}


@dataclass(frozen=True)
class MetricRef:
    """A metric as a dashboard widget or an alarm names it; a dimension value of None: any (a SEARCH)."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str | None], ...]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} {dict(self.dimensions)}"


# --- The template's side ----------------------------------------------------------------------------------


def _template() -> sam.Template:
    return sam.load(TEMPLATE)


def _substitute_logical_ids(text: str) -> str:
    """``${RouterFunction}`` -> ``RouterFunction``: locally a function's name is its logical ID (the name
    ``snapllm local serve`` reports to Powertools), and an alarm's ARN only needs to be a string."""
    return re.sub(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}", r"\1", text)


def rendered_dashboard(template: sam.Template) -> dict[str, Any]:
    (_, dashboard), *_ = template.resources("AWS::CloudWatch::Dashboard")
    body = template.resolve(dashboard["Properties"]["DashboardBody"])
    text = body.partial if isinstance(body, sam.Unresolved) else body
    assert isinstance(text, str)
    return json.loads(_substitute_logical_ids(text))


def _widget_metrics(widget: Mapping[str, Any]) -> Iterator[MetricRef]:
    for entry in widget["properties"].get("metrics", []):
        if isinstance(entry[0], dict):
            yield from _search_metrics(entry[0]["expression"])
            continue
        names = [part for part in entry if isinstance(part, str)]
        namespace, name, *pairs = names
        yield MetricRef(namespace, name, tuple(zip(pairs[::2], pairs[1::2], strict=True)))


def _search_metrics(expression: str) -> Iterator[MetricRef]:
    match = re.fullmatch(r"""SEARCH\('\{([^}]*)\} MetricName="([^"]+)"', '\w+', \d+\)""", expression)
    assert match, f"not a SEARCH this test reads: {expression}"
    namespace, *dimensions = (part.strip() for part in match.group(1).split(","))
    yield MetricRef(namespace, match.group(2), tuple((name, None) for name in dimensions))


def _alarm_metrics(template: sam.Template) -> Iterator[tuple[str, MetricRef]]:
    for name, alarm in template.resources("AWS::CloudWatch::Alarm"):
        properties = template.resolve(alarm["Properties"])
        stats = [m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in properties:
            stats.append(properties)
        assert stats, f"{name} names no metric"
        for metric in stats:
            dimensions = tuple((d["Name"], d["Value"]) for d in metric.get("Dimensions", []))
            yield name, MetricRef(metric["Namespace"], metric["MetricName"], dimensions)


# --- What exists ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> list[dict[str, Any]]:
    """Every EMF blob ``snapllm local serve`` printed while answering, buffered and streamed, a good and
    a refused request, and one that falls back from an always-on target nothing listens on."""
    output = tmp_path_factory.mktemp("serve") / "serve.out"
    down = ["--route", f"always-down=http://127.0.0.1:{free_port()}/v1", "--fallback", f"always-down={MODEL}"]
    with (
        output.open("w") as sink,
        ServeProcess.start(env=SERVE_ENV, stdout=sink, stderr=sink, args=down) as server,
    ):
        url = f"{server.base_url}/chat/completions"
        assert httpx.post(url, json=CHAT, timeout=120).status_code == 200
        assert httpx.post(url, json={**CHAT, "model": "always-down"}, timeout=120).status_code == 200
        with httpx.stream("POST", url, json={**CHAT, "stream": True}, timeout=120) as response:
            assert response.status_code == 200 and list(response.iter_lines())
        for stream in (False, True):
            assert httpx.post(url, json={**CHAT, "n": 2, "stream": stream}, timeout=120).status_code == 400
    blobs = []
    for line in output.read_text().splitlines():
        start = line.find('{"_aws"')
        if start >= 0:
            blobs.append(json.loads(line[start:]))
    return blobs


def _derived_by_filters(template: sam.Template) -> set[tuple[str, str]]:
    """``(namespace, metric)`` of each metric filter whose pattern and value select a number from the
    matching report record, and select nothing from a warm invoke's report."""
    derived = set()
    for name, resource in template.resources("AWS::Logs::MetricFilter"):
        properties = template.resolve(resource["Properties"])
        pattern = properties["FilterPattern"]
        matching = [r for r in (RESTORED_REPORT, INITIALIZED_REPORT) if _matches(pattern, r)]
        assert len(matching) == 1, f"{name}: {pattern} matches {len(matching)} of the two cold-start reports"
        assert not _matches(pattern, WARM_REPORT), f"{name} counts warm invokes"
        for transformation in properties["MetricTransformations"]:
            value = _select(transformation["MetricValue"], matching[0])
            assert isinstance(value, int | float), f"{name}: {transformation['MetricValue']} is not a number"
            derived.add((transformation["MetricNamespace"], transformation["MetricName"]))
    return derived


def _select(selector: str, record: Mapping[str, Any]) -> Any:
    value: Any = record
    for key in selector.removeprefix("$.").split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _matches(pattern: str, record: Mapping[str, Any]) -> bool:
    """CloudWatch's JSON filter pattern, the subset the template uses: ``{ $.a = "x" && $.b.c = * }``."""
    inner = pattern.strip()
    assert inner.startswith("{") and inner.endswith("}"), pattern
    for term in inner[1:-1].split("&&"):
        selector, _, expected = (part.strip() for part in term.partition("="))
        value = _select(selector, record)
        if expected == "*":
            if value is None:
                return False
        elif value != json.loads(expected):
            return False
    return True


def _values_from_code() -> dict[str, set[str]]:
    """Dimension values the alarms name that a request only produces when something fails on the server:
    the status classes of the errors the code can answer with."""
    statuses = {cls.status_code for cls in _subclasses(errors.RequestError)}
    return {"status_class": {status_class(status) for status in statuses}}


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _exists(ref: MetricRef, blobs: list[dict[str, Any]], derived: set[tuple[str, str]]) -> bool:
    if not ref.dimensions and (ref.namespace, ref.name) in derived:
        return True
    from_code = _values_from_code()
    wanted = {name for name, _ in ref.dimensions}
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            if directive["Namespace"] != ref.namespace:
                continue
            if ref.name not in {metric["Name"] for metric in directive["Metrics"]}:
                continue
            if wanted not in [set(dimensions) for dimensions in directive["Dimensions"]]:
                continue
            if all(
                value is None or blob.get(name) == value or value in from_code.get(name, ())
                for name, value in ref.dimensions
            ):
                return True
    return False


# --- Tests ------------------------------------------------------------------------------------------------


def test_every_dashboard_metric_is_emitted_or_derived(emitted):
    template = _template()
    derived = _derived_by_filters(template)
    refs = [ref for widget in rendered_dashboard(template)["widgets"] for ref in _widget_metrics(widget)]
    assert len(refs) >= 20
    missing = [str(ref) for ref in refs if not _exists(ref, emitted, derived)]
    assert not missing, f"the dashboard names metrics nothing emits: {missing}"


def test_every_alarm_metric_is_emitted(emitted):
    template = _template()
    alarms = list(_alarm_metrics(template))
    assert {name for name, _ in alarms} == {"ServerErrorRateAlarm", "LatencyP99Alarm"}
    missing = [f"{name}: {ref}" for name, ref in alarms if not _exists(ref, emitted, set())]
    assert not missing, f"alarms on metrics nothing emits: {missing}"


def test_the_dashboard_covers_what_an_operator_looks_for():
    dashboard = rendered_dashboard(_template())
    names = {ref.name for widget in dashboard["widgets"] for ref in _widget_metrics(widget)}
    for name in ("RequestCount", "Errors", "Latency", "TimeToFirstToken", "TokensPerSecond", "ColdStart",
                 "InferenceRestoreDuration", "StreamRestoreDuration"):  # fmt: skip
        assert name in names, name
    stats = {
        option["stat"]
        for widget in dashboard["widgets"]
        for entry in widget["properties"].get("metrics", [])
        for option in entry
        if isinstance(option, dict) and "stat" in option
    }
    assert {"p50", "p99"} <= stats
    alarms = next(w for w in dashboard["widgets"] if w["type"] == "alarm")["properties"]["alarms"]
    assert alarms == ["ServerErrorRateAlarm", "LatencyP99Alarm"]


def test_the_snapstart_functions_log_the_reports_the_filters_read():
    template = _template()
    filtered = {
        r["Properties"]["LogGroupName"]["Ref"] for _, r in template.resources("AWS::Logs::MetricFilter")
    }
    for name in ("InferenceFunction", "StreamFunction"):
        logging = template.function(name).properties["LoggingConfig"]
        assert logging["LogFormat"] == "JSON", "the filters read JSON platform records"
        assert logging["SystemLogLevel"] in {"INFO", "DEBUG"}, "platform.report is logged at INFO"
        assert logging["LogGroup"].expression["Ref"] in filtered, f"{name} logs where no filter reads"


@pytest.mark.parametrize("topic", ["", "arn:aws:sns:eu-west-1:123456789012:snapllm-alarms"])
def test_alarms_notify_the_topic_only_when_one_is_given(topic):
    template = sam.load(TEMPLATE, overrides={"AlarmTopicArn": topic})
    for name, alarm in template.resources("AWS::CloudWatch::Alarm"):
        properties = template.resolve(alarm["Properties"])
        expected = [topic] if topic else None
        assert properties.get("AlarmActions") == expected, name
        assert properties.get("OKActions") == expected, name
