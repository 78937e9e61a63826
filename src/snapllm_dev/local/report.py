"""Render phase timings as the table the local runner and the benchmarks print."""

from __future__ import annotations

from collections.abc import Iterable

from snapllm.text_table import columns


def table(rows: Iterable[tuple[str, str]], *, title: str) -> str:
    """A two-column text table.

    >>> print(table([("init", "1.20 s")], title="phases"))
    phases
      init  1.20 s
    """
    rows = list(rows)
    return "\n".join([title, columns(rows, indent="  ")]) if rows else title


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def megabytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.0f} MB"
