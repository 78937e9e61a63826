"""`snapllm bench aws`: REPORT parsing and statistics on recorded lines, spending, and no credentials.

The AWS calls themselves need a deployed stack; these tests cover everything around them. The REPORT lines
are in the formats Lambda writes: text (tab-separated fields, as in the Lambda developer guide's log
examples) and JSON (``LogFormat: JSON``, the Telemetry API's ``platform.report`` record).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time

import pytest

from snapllm_dev.bench import aws, stats
from snapllm_dev.bench.aws import BenchAwsError, Spending, speed_of, worst_case_usd
from snapllm_dev.bench.lambda_reports import ReportFormatError, parse_line, parse_log, summarize
from snapllm_dev.cost.prices import load

ON_DEMAND_COLD = (
    "REPORT RequestId: 8f507cfc-xmpl-4697-b07a-ac58fc914c95\tDuration: 15.74 ms\tBilled Duration: 147 ms\t"
    "Memory Size: 128 MB\tMax Memory Used: 56 MB\tInit Duration: 130.49 ms\t"
)
WARM = (
    "REPORT RequestId: 5d9d007f-0a8c-4c5b-8a5e-3b1f1e0e9d11\tDuration: 412.03 ms\tBilled Duration: 413 ms\t"
    "Memory Size: 10240 MB\tMax Memory Used: 402 MB\t"
)
SNAPSTART_RESTORE = (
    "REPORT RequestId: 0c5c8a7e-6f0e-4b8e-9d39-2f7a1c9e4b20\tDuration: 611.52 ms\tBilled Duration: 612 ms\t"
    "Memory Size: 10240 MB\tMax Memory Used: 398 MB\tRestore Duration: 488.18 ms\t"
    "Billed Restore Duration: 207 ms\t"
)
JSON_RESTORE = json.dumps(
    {
        "time": "2026-11-22T10:00:00.000Z",
        "type": "platform.report",
        "record": {
            "requestId": "b7d0c1f2-1111-4222-8333-944455556666",
            "metrics": {
                "durationMs": 598.4,
                "billedDurationMs": 599,
                "memorySizeMB": 10240,
                "maxMemoryUsedMB": 401,
                "restoreDurationMs": 502.7,
                "billedRestoreDurationMs": 215,
            },
            "status": "success",
        },
    }
)
JSON_WARM = json.dumps(
    {
        "time": "2026-11-22T10:00:01.000Z",
        "type": "platform.report",
        "record": {
            "requestId": "c1",
            "metrics": {
                "durationMs": 400.0,
                "billedDurationMs": 400,
                "memorySizeMB": 10240,
                "maxMemoryUsedMB": 401,
            },
        },
    }
)


def test_text_report_on_demand_cold_start():
    report = parse_line(ON_DEMAND_COLD)
    assert report is not None
    assert report.request_id == "8f507cfc-xmpl-4697-b07a-ac58fc914c95"
    assert (report.duration_ms, report.billed_duration_ms) == (15.74, 147)
    assert (report.memory_size_mb, report.max_memory_used_mb) == (128, 56)
    assert report.init_duration_ms == 130.49 and report.restore_duration_ms is None
    assert report.phase == "init"
    assert report.cold_start_ms == pytest.approx(146.23)


def test_text_report_snapstart_restore_and_warm():
    restore = parse_line(SNAPSTART_RESTORE)
    assert restore is not None and restore.phase == "restore"
    assert restore.restore_duration_ms == 488.18 and restore.billed_restore_duration_ms == 207
    assert restore.init_duration_ms is None
    assert restore.cold_start_ms == pytest.approx(611.52 + 488.18)
    warm = parse_line(WARM)
    assert warm is not None and warm.phase == "warm" and warm.billed_duration_ms == 413


def test_json_reports():
    restore = parse_line(JSON_RESTORE)
    assert restore is not None and restore.phase == "restore"
    assert (restore.restore_duration_ms, restore.billed_restore_duration_ms) == (502.7, 215)
    assert restore.request_id == "b7d0c1f2-1111-4222-8333-944455556666"
    warm = parse_line(JSON_WARM)
    assert warm is not None and warm.phase == "warm" and warm.duration_ms == 400.0
    # Other JSON records are not reports.
    assert parse_line(json.dumps({"type": "platform.start", "record": {"requestId": "x"}})) is None
    assert parse_line('{"level": "INFO", "message": "generated 48 tokens"}') is None


def test_a_log_tail_yields_its_reports_only():
    tail = "\n".join(
        [
            "START RequestId: 0c5c8a7e-6f0e-4b8e-9d39-2f7a1c9e4b20 Version: 7",
            '{"level":"INFO","message":"REPORT-like text in a function log line"}',
            "END RequestId: 0c5c8a7e-6f0e-4b8e-9d39-2f7a1c9e4b20",
            SNAPSTART_RESTORE,
            "XRAY TraceId: 1-5e34a614-10bdxmplf1fb44f07bc535a1\tSegmentId: 07f5xmpl2d1f6f85\tSampled: true",
        ]
    )
    # What Invoke(LogType=Tail) returns, base64 encoded.
    decoded = base64.b64decode(base64.b64encode(tail.encode())).decode()
    (report,) = parse_log(decoded)
    assert report.phase == "restore"


def test_a_truncated_report_is_an_error():
    with pytest.raises(ReportFormatError, match="lacks billed_duration_ms"):
        parse_line("REPORT RequestId: abc\tDuration: 12.00 ms\tMemory Size: 128 MB\tMax Memory Used: 5 MB")


def test_percentiles_and_per_phase_summary():
    # 1..100 ms: inclusive percentiles interpolate within the values.
    summary = stats.summarize([float(v) for v in range(1, 101)])
    assert summary == {
        "n": 100,
        "p50": 50.5,
        "p90": pytest.approx(90.1),
        "p95": pytest.approx(95.05),
        "p99": pytest.approx(99.01),
        "min": 1,
        "max": 100,
        "mean": 50.5,
    }
    one = {"n": 1, "p50": 7.0, "p90": 7.0, "p95": 7.0, "p99": 7.0, "min": 7.0, "max": 7.0, "mean": 7.0}
    assert stats.summarize([7.0]) == one
    assert stats.summarize([]) == {"n": 0}

    warm_lines = [WARM.replace("412.03", f"{400 + i}.00") for i in range(11)]
    reports = parse_log("\n".join([SNAPSTART_RESTORE, JSON_RESTORE, ON_DEMAND_COLD, *warm_lines]))
    summary = summarize(reports)
    assert set(summary) == {"restore", "init", "warm"}
    assert summary["warm"]["duration_ms"]["n"] == 11
    assert summary["warm"]["duration_ms"]["p50"] == 405.0
    assert summary["restore"]["restore_duration_ms"]["p50"] == pytest.approx((488.18 + 502.7) / 2)
    assert summary["restore"]["cold_start_ms"]["max"] == pytest.approx(598.4 + 502.7)  # the JSON one
    assert summary["init"]["init_duration_ms"]["p50"] == 130.49


def test_invoke_cost_from_its_report():
    prices = load()
    restore = parse_line(SNAPSTART_RESTORE)
    assert restore is not None
    # (612 + 207) ms billed x 10 GB x $0.0000133334 + $0.20 / 1M + 10 GB x $0.0001397998 restored
    expected = 0.819 * 10 * 0.0000133334 + 0.2e-6 + 10 * 0.0001397998
    assert restore.cost_usd(prices, "arm64") == pytest.approx(expected)


def test_spending_asks_before_passing_the_limit():
    questions: list[str] = []
    spending = Spending(limit_usd=1.0, ask=lambda q: questions.append(q) or False)
    spending.approve(0.5)
    assert questions == []
    with pytest.raises(BenchAwsError, match=r"more than \$1.00"):
        spending.approve(1.5)
    assert "up to $1.50" in questions[0]
    yes = Spending(limit_usd=1.0, ask=lambda q: True)
    yes.approve(1.5)
    yes.add("cold invokes", 0.2, invocation=True)
    assert (yes.invocations, yes.usd, yes.limit_usd) == (1, 0.2, 1.5)


def test_worst_case_prices_every_invoke_at_the_timeout_and_each_version_cache():
    prices = load()
    usd = worst_case_usd(prices, "arm64", 10240, 60, invokes=10, versions=2)
    per_invoke = 60 * 10 * 0.0000133334 + 0.2e-6 + 10 * 0.0001397998
    assert usd == pytest.approx(10 * per_invoke + 2 * 3 * 3600 * 10 * 0.0000015046)


def test_speed_for_the_cost_calculator():
    reports = parse_log("\n".join([SNAPSTART_RESTORE, WARM]))
    samples = [
        {
            "timings": {"tokens_per_second": 118.0, "time_to_first_token_ms": 35.0},
            "usage": {"prompt_tokens": 39},
        }
    ]
    speed = speed_of(samples, reports)
    assert speed == {
        "tokens_per_s": 118.0,
        "ttft_ms": 35.0,
        "prompt_tokens": 39,
        "cold_extra_ms": pytest.approx(611.52 + 488.18 - 412.03),
    }


def test_without_credentials_it_stops_at_once(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": "us-east-1",
    }
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "snapllm_dev.cli", "bench", "aws", "--stack", "snapllm-dev"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.perf_counter() - started
    assert result.returncode == 2
    assert "no AWS credentials found" in result.stderr
    assert "Traceback" not in result.stderr
    assert elapsed < 15


# --- The run's orchestration, against stand-ins for the AWS clients -------------------------------------
# A deployed stack cannot run here: these fakes answer the few calls `measure` makes, and record them.


class _Payload:
    def __init__(self, body: dict):
        self._raw = json.dumps(body).encode()

    def read(self) -> bytes:
        return self._raw


class FakeLambda:
    def __init__(self):
        self.environment = {"SNAPLLM_MODEL_KEY": "models/m.gguf"}
        self.versions: list[str] = []
        self.deleted: list[str] = []
        self.invoked: list[str] = []
        self.fresh: set[str] = set()
        self.published_with: list[dict[str, str]] = []

    def get_function_configuration(self, FunctionName):
        return {
            "MemorySize": 10240,
            "Timeout": 60,
            "Architectures": ["arm64"],
            "SnapStart": {"ApplyOn": "PublishedVersions", "OptimizationStatus": "On"},
            "Environment": {"Variables": dict(self.environment)},
        }

    def update_function_configuration(self, FunctionName, Environment):
        self.environment = dict(Environment["Variables"])

    def get_waiter(self, name):
        class _Waiter:
            def wait(self, **kwargs):
                pass

        return _Waiter()

    def publish_version(self, FunctionName, Description):
        version = str(len(self.versions) + 1)
        self.versions.append(version)
        self.published_with.append(dict(self.environment))
        self.fresh.add(version)
        return {"Version": version}

    def invoke(self, FunctionName, Qualifier, LogType, Payload):
        self.invoked.append(Qualifier)
        restored = Qualifier in self.fresh
        line = SNAPSTART_RESTORE if restored else WARM
        self.fresh.discard(Qualifier)
        body = {
            "object": "chat.completion",
            "usage": {"prompt_tokens": 39, "completion_tokens": 48},
            "timings": {"tokens_per_second": 118.0, "time_to_first_token_ms": 95.0 if restored else 35.0},
        }
        return {"Payload": _Payload(body), "LogResult": base64.b64encode(line.encode()).decode()}

    def delete_function(self, FunctionName, Qualifier):
        self.deleted.append(Qualifier)


class FakeCloudFormation:
    def describe_stack_resources(self, StackName):
        resource = {
            "LogicalResourceId": "InferenceFunction",
            "ResourceType": "AWS::Lambda::Function",
            "PhysicalResourceId": "snapllm-dev-Inference",
        }
        return {"StackResources": [resource]}

    def describe_stacks(self, StackName):
        return {"Stacks": [{"Outputs": []}]}


class FakeSession:
    region_name = "us-east-1"

    def __init__(self):
        self.lambda_, self.cloudformation = FakeLambda(), FakeCloudFormation()

    def client(self, name):
        return self.lambda_ if name == "lambda" else self.cloudformation


def _args(**overrides):
    fields = {"stack": "snapllm-dev", "region": None, "function": "InferenceFunction", "cold": 2, "warm": 3}
    fields |= {"stream": 0, "budget_usd": 5.0, "yes": False, "json": True, "prefault": None}
    return argparse.Namespace(**(fields | overrides))


def test_measure_publishes_invokes_counts_and_cleans_up(monkeypatch):
    session = FakeSession()
    monkeypatch.setattr(aws, "session_with_credentials", lambda region: session)
    result = aws.measure(_args(), ask=lambda q: False)
    fake = session.lambda_
    # Two cold rounds, each on a version published after a configuration change, then warm invokes.
    assert fake.invoked == ["1", "2", "2", "2", "2"]
    assert result["reports"]["restore"]["restore_duration_ms"]["n"] == 2
    assert result["reports"]["warm"]["duration_ms"]["n"] == 3
    # Cleaned up: the versions deleted, the variables as they were.
    assert fake.deleted == ["1", "2"] and result["versions_published_and_deleted"] == ["1", "2"]
    assert fake.environment == {"SNAPLLM_MODEL_KEY": "models/m.gguf"}
    spent = result["spent"]
    assert spent["invocations"] == 5
    cache = 2 * 3 * 3600 * 10 * 0.0000015046
    assert spent["by_item"]["SnapStart cache (3 h minimum per version)"] == pytest.approx(cache, abs=1e-4)
    assert spent["usd"] > cache
    assert result["speed"]["tokens_per_s"] == 118.0


def test_measure_reports_the_first_request_after_a_restore_per_prefault_mode(monkeypatch):
    session = FakeSession()
    monkeypatch.setattr(aws, "session_with_credentials", lambda region: session)
    result = aws.measure(_args(prefault="weights"), ask=lambda q: False)
    # Every cold version was published with the mode; the function's variables are back as they were.
    assert [env.get("SNAPLLM_PREFAULT") for env in session.lambda_.published_with] == ["weights", "weights"]
    assert "SNAPLLM_PREFAULT" not in session.lambda_.environment
    figures = result["after_restore"]
    assert figures["prefault"] == "weights"
    assert figures["restore_ms"] == pytest.approx(488.18)
    # Restored invokes: first token at 95 ms, REPORT Duration 611.52 ms; warm: 35 ms and 412.03 ms.
    assert figures["first_token_gap_ms"] == pytest.approx(60.0)
    assert figures["first_over_warm_invoke"] == pytest.approx(611.52 / 412.03)
    assert "first invoke / warm invoke" in aws.render(result)


def test_measure_stops_before_publishing_when_over_budget(monkeypatch):
    session = FakeSession()
    monkeypatch.setattr(aws, "session_with_credentials", lambda region: session)
    with pytest.raises(BenchAwsError, match="stopped before spending"):
        aws.measure(_args(budget_usd=0.01), ask=lambda q: False)
    assert session.lambda_.versions == [] and session.lambda_.invoked == []
