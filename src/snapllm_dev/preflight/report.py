"""Formats the preflight result: one line per finding, then a table of every function and package.

Example:
    print(table(["Name", "Size"], function_rows(targets)))
"""

from __future__ import annotations

from collections.abc import Sequence

from snapllm.text_table import columns
from snapllm_dev.preflight.elf import format_version
from snapllm_dev.preflight.rules import Finding, Target, mb
from snapllm_dev.preflight.template import Layer


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with a rule under its headers."""
    return columns(rows, header=headers, rule=True)


def function_rows(targets: Sequence[Target]) -> list[list[str]]:
    """Rows of the function summary: architecture, memory, layers, unzipped size, SnapStart, durable."""
    rows = []
    for target in targets:
        fn = target.function
        durable = fn.durable
        rows.append(
            [
                fn.name,
                fn.architecture,
                f"{fn.memory} MB",
                ", ".join(_layer_label(layer) for layer in fn.layers) or "-",
                mb(sum(pkg.unzipped_bytes for pkg in target.packages)),
                "yes" if fn.snapstart else "no",
                f"yes ({durable.get('ExecutionTimeout')} s)" if durable else "no",
            ]
        )
    return rows


def package_rows(targets: Sequence[Target], zipped: bool = True) -> list[list[str]]:
    """Rows of the package table: each function's code and each layer once, with sizes and ELF facts."""
    rows = []
    seen: set[str] = set()
    for target in targets:
        for pkg in target.packages:
            if str(pkg.root) in seen:
                continue
            seen.add(str(pkg.root))
            machines = sorted({elf.machine for elf in pkg.elves})
            glibcs = [v for v in (elf.max_version("GLIBC") for elf in pkg.elves) if v]
            rows.append(
                [
                    pkg.name,
                    str(len(pkg.files)),
                    mb(pkg.unzipped_bytes),
                    mb(pkg.zipped_bytes()) if zipped else "-",
                    str(len(pkg.elves)),
                    ",".join(machines) or "-",
                    format_version(max(glibcs)) if glibcs else "-",
                ]
            )
    return rows


def render(findings: Sequence[Finding], targets: Sequence[Target], zipped: bool = True) -> str:
    """The whole report: findings first (what to fix), then the two tables, then a verdict line."""
    errors = [f for f in findings if f.severity == "error"]
    parts = [str(f) for f in findings]
    if parts:
        parts.append("")
    parts.append(
        table(
            ["Function", "Arch", "Memory", "Layers", "Unzipped", "SnapStart", "Durable"],
            function_rows(targets),
        )
    )
    parts.append("")
    parts.append(
        table(
            ["Package", "Files", "Unzipped", "Zipped", "ELF", "Machine", "Max GLIBC"],
            package_rows(targets, zipped),
        )
    )
    parts.append("")
    verdict = f"preflight: {len(errors)} problem(s)" if errors else "preflight: OK"
    notes = len(findings) - len(errors)
    parts.append(verdict + (f", {notes} note(s)" if notes else ""))
    return "\n".join(parts)


def _layer_label(layer: Layer) -> str:
    # A layer ARN is long; its name and version after ":layer:" say which one it is.
    if layer.path is None and ":layer:" in layer.name:
        return "arn:...:layer:" + layer.name.split(":layer:", 1)[1]
    return layer.name
