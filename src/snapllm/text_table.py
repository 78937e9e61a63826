"""Plain-text tables in columns: the agent's operation table and every table the developer tooling prints.

>>> print(columns([("a", "1.0 MB")], header=("Name", "Size"), rule=True))
Name  Size
----  ------
a     1.0 MB
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


def columns(
    rows: Iterable[Sequence[object]],
    *,
    header: Sequence[str] | None = None,
    rule: bool = False,
    right: Collection[int] = (),
    indent: str = "",
) -> str:
    """``rows`` (under ``header``, and a line of dashes under it with ``rule``) in columns as wide as their
    widest cell, two spaces apart; the columns whose indexes are in ``right`` aligned to the right."""
    lines = [[str(cell) for cell in row] for row in rows]
    if header is not None:
        lines.insert(0, list(header))
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=False)]
    if header is not None and rule:
        lines.insert(1, ["-" * width for width in widths])
    return "\n".join(
        indent
        + "  ".join(
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(line, widths, strict=False))
        ).rstrip()
        for line in lines
    )
