"""Lambda's per-invoke REPORT records, parsed, priced, and summarised per phase.

It reads both log formats (text, and JSON's ``platform.report``), with and without SnapStart;
docs/benchmarks.md says what a record carries and how a SnapStart cold start is billed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from snapllm_dev.bench import stats
from snapllm_dev.cost.prices import Architecture, Prices

Phase = Literal["init", "restore", "warm"]

# "Name: 12.34 ms" or "Name: 128 MB", the value possibly without decimals.
_FIELD = re.compile(r"(?P<name>[A-Za-z][A-Za-z ]*?):\s*(?P<value>\d+(?:\.\d+)?)\s*(?:ms|MB)\b")
_REQUEST_ID = re.compile(r"REPORT RequestId:\s*(?P<id>\S+)")
_TEXT_NAMES = {
    "Duration": "duration_ms",
    "Billed Duration": "billed_duration_ms",
    "Memory Size": "memory_size_mb",
    "Max Memory Used": "max_memory_used_mb",
    "Init Duration": "init_duration_ms",
    "Restore Duration": "restore_duration_ms",
    "Billed Restore Duration": "billed_restore_duration_ms",
}
_JSON_NAMES = {
    "durationMs": "duration_ms",
    "billedDurationMs": "billed_duration_ms",
    "memorySizeMB": "memory_size_mb",
    "maxMemoryUsedMB": "max_memory_used_mb",
    "initDurationMs": "init_duration_ms",
    "restoreDurationMs": "restore_duration_ms",
    "billedRestoreDurationMs": "billed_restore_duration_ms",
}


class ReportFormatError(ValueError):
    """A REPORT record without the fields every invoke's report has."""


@dataclass(frozen=True)
class Report:
    request_id: str
    duration_ms: float
    billed_duration_ms: float
    memory_size_mb: float
    max_memory_used_mb: float
    init_duration_ms: float | None = None
    restore_duration_ms: float | None = None
    billed_restore_duration_ms: float | None = None

    @property
    def phase(self) -> Phase:
        if self.restore_duration_ms is not None:
            return "restore"
        return "init" if self.init_duration_ms is not None else "warm"

    @property
    def cold_start_ms(self) -> float:
        """Wall time the platform reports for the invoke, the environment's start included."""
        return self.duration_ms + (self.init_duration_ms or 0.0) + (self.restore_duration_ms or 0.0)

    def cost_usd(self, prices: Prices, architecture: Architecture) -> float:
        """What this invoke was billed at first-tier prices: GB-s of the billed durations, the request, and
        a restore's GB restored. (An on-demand init is not billed for managed runtimes.)"""
        gb = self.memory_size_mb / 1024
        lam = prices.lambda_
        billed_s = (self.billed_duration_ms + (self.billed_restore_duration_ms or 0.0)) / 1000
        restore = gb * lam.snapstart.restore_usd_per_gb if self.phase == "restore" else 0.0
        return (
            billed_s * gb * lam.duration(architecture).first_tier_usd_per_gb_s
            + lam.requests.usd_per_million / 1e6
            + restore
        )


def _report(request_id: str, fields: dict[str, float]) -> Report:
    missing = {"duration_ms", "billed_duration_ms", "memory_size_mb", "max_memory_used_mb"} - fields.keys()
    if missing:
        raise ReportFormatError(f"REPORT {request_id} lacks {', '.join(sorted(missing))}")
    return Report(request_id=request_id, **fields)


def parse_line(line: str) -> Report | None:
    """The report in one log line (text or JSON format), or None if the line is not a REPORT."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            record = json.loads(stripped)
        except json.JSONDecodeError:
            return None
        if not isinstance(record, dict) or record.get("type") != "platform.report":
            return None
        body = record.get("record") or {}
        metrics = body.get("metrics") or {}
        fields = {_JSON_NAMES[k]: float(v) for k, v in metrics.items() if k in _JSON_NAMES}
        return _report(str(body.get("requestId", "")), fields)
    match = _REQUEST_ID.search(stripped)
    if not match:
        return None
    rest = stripped[match.end() :]
    fields = {}
    for field in _FIELD.finditer(rest):
        name = field["name"].strip()
        if name in _TEXT_NAMES:
            fields[_TEXT_NAMES[name]] = float(field["value"])
    return _report(match["id"], fields)


def parse_log(text: str) -> list[Report]:
    """Every REPORT in a log excerpt (for example an invoke's base64-decoded ``LogResult`` tail)."""
    return [report for line in text.splitlines() if (report := parse_line(line)) is not None]


def summarize(reports: list[Report]) -> dict[str, dict[str, dict[str, float]]]:
    """Per phase (restore, init, warm), the percentiles of each reported duration and of memory used."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for phase in ("restore", "init", "warm"):
        chosen = [r for r in reports if r.phase == phase]
        if not chosen:
            continue
        columns = {
            "duration_ms": [r.duration_ms for r in chosen],
            "billed_duration_ms": [r.billed_duration_ms for r in chosen],
            "max_memory_used_mb": [r.max_memory_used_mb for r in chosen],
        }
        if phase != "warm":
            columns["cold_start_ms"] = [r.cold_start_ms for r in chosen]
        if phase == "init":
            columns["init_duration_ms"] = [r.init_duration_ms or 0.0 for r in chosen]
        if phase == "restore":
            columns["restore_duration_ms"] = [r.restore_duration_ms or 0.0 for r in chosen]
            columns["billed_restore_duration_ms"] = [r.billed_restore_duration_ms or 0.0 for r in chosen]
        summary[phase] = {name: stats.summarize(values) for name, values in columns.items()}
    return summary
