"""Per-operation report of a durable run (name, type, status, attempts, checkpointed bytes), built from the
operations the local runner recorded, which are those the service keeps.

    report = OperationReport.from_test_result(result, input_payload=json.dumps(event), budget_bytes=65536)
    print(report.render())

What an operation's checkpointed bytes are: docs/agents.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from snapllm.text_table import columns


@dataclass(frozen=True)
class OperationRow:
    name: str
    type: str
    status: str
    attempts: int | None
    bytes: int
    depth: int


@dataclass(frozen=True)
class OperationReport:
    rows: list[OperationRow]
    budget_bytes: int

    @classmethod
    def from_test_result(
        cls, result: Any, *, input_payload: str | None, budget_bytes: int
    ) -> OperationReport:
        """``result`` is a ``DurableFunctionTestResult`` from the SDK's testing runner."""
        rows: list[OperationRow] = []
        if input_payload is not None:
            rows.append(OperationRow("(execution input)", "EXECUTION", "-", None, _size(input_payload), 0))

        def visit(operations: list[Any], depth: int) -> None:
            for op in sorted(operations, key=_order):
                payload = getattr(op, "result", None)
                error = getattr(op, "error", None)
                size = _size(payload) + (_size(json.dumps(error.to_dict())) if error is not None else 0)
                attempts = getattr(op, "attempt", None) if _value(op.operation_type) == "STEP" else None
                rows.append(
                    OperationRow(
                        name=op.name or op.operation_id,
                        type=_label(op),
                        status=_value(op.status),
                        attempts=attempts,
                        bytes=size,
                        depth=depth,
                    )
                )
                visit(list(getattr(op, "child_operations", None) or []), depth + 1)

        visit(list(result.operations), 0)
        output = result.result if result.result is not None else None
        rows.append(
            OperationRow("(execution result)", "EXECUTION", _value(result.status), None, _size(output), 0)
        )
        return cls(rows=rows, budget_bytes=budget_bytes)

    @property
    def largest(self) -> OperationRow:
        return max(self.rows, key=lambda row: row.bytes)

    @property
    def total_bytes(self) -> int:
        return sum(row.bytes for row in self.rows)

    @property
    def over_budget(self) -> list[OperationRow]:
        return [row for row in self.rows if row.bytes > self.budget_bytes]

    def find(self, name: str) -> OperationRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_bytes": self.budget_bytes,
            "largest": {"name": self.largest.name, "bytes": self.largest.bytes},
            "total_bytes": self.total_bytes,
            "operations": [row.__dict__ for row in self.rows],
        }

    def render(self) -> str:
        header = ("operation", "type", "status", "attempts", "checkpointed")
        lines = [
            (
                "  " * row.depth + row.name,
                row.type,
                row.status,
                "-" if row.attempts is None else str(row.attempts),
                f"{row.bytes:,} B",
            )
            for row in self.rows
        ]
        largest = self.largest
        summary = (
            f"largest checkpointed operation: {largest.name} {largest.bytes:,} B "
            f"(budget {self.budget_bytes:,} B, {'OK' if not self.over_budget else 'OVER BUDGET'}); "
            f"total {self.total_bytes:,} B in {len(self.rows)} rows"
        )
        return "\n".join([columns(lines, header=header, rule=True, right=(3, 4)), summary])


def _size(payload: Any) -> int:
    if payload is None:
        return 0
    return len(payload.encode() if isinstance(payload, str) else payload)


def _value(enum_or_str: Any) -> str:
    return str(getattr(enum_or_str, "value", enum_or_str))


def _label(op: Any) -> str:
    kind = _value(op.operation_type)
    sub_type = getattr(op, "sub_type", None)
    return f"{kind}/{sub_type}" if kind == "CONTEXT" and sub_type else kind


def _order(op: Any) -> tuple[Any, str]:
    return (op.start_timestamp.timestamp() if op.start_timestamp else 0.0, op.operation_id)
