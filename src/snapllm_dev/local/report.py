"""Render phase timings as the table the local runner and the benchmarks print."""

from __future__ import annotations

from collections.abc import Iterable


def table(rows: Iterable[tuple[str, str]], *, title: str) -> str:
    """A two-column text table.

    >>> print(table([("init", "1.20 s")], title="phases"))
    phases
      init  1.20 s
    """
    rows = list(rows)
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join([title, *(f"  {name.ljust(width)}  {value}" for name, value in rows)])


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def megabytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.0f} MB"
