"""``snapllm bench schemas DIR``: real-world JSON schemas served, and how right their constraints are.

    snapllm bench schemas /work/shared/jsonschemabench/cases --json

``DIR`` holds JSONSchemaBench cases (``<Dataset>---<id>.json``: a ``schema`` and labelled ``tests``). The
checks without a model (:func:`check_case`) are also the fast tier, ``tests/unit/test_jsonschemabench.py``.
docs/structured-output.md ("Measured on JSONSchemaBench") says what each figure counts, and the results.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import llguidance

from snapllm.errors import SnapllmError
from snapllm.protocol.constraints.compiled_schema import (
    CompiledSchema,
    byte_tokenizer,
    clear_cache,
    compile_schema,
    parser_limits,
)
from snapllm.text_table import columns
from snapllm_dev.bench.stats import Percentiles
from snapllm_dev.testmodels.families import QWEN3_TOKENIZER


@dataclass(frozen=True)
class Spacing:
    """How JSON is written between its tokens: after a comma, after a colon, and the indentation step."""

    item: str
    key: str
    indent: int | None = None


#: How an instance is written before the constraint reads it: compact, json.dumps' default, indented by 2.
SPACINGS = {
    "compact": Spacing(",", ":"),
    "default": Spacing(", ", ": "),
    "indent=2": Spacing(",", ": ", 2),
}


#: The most object members tried while looking for key orders the constraint takes, per instance.
MAX_ORDERS = 2000


class Constraint:
    """A compiled schema's constraint, checked against JSON values over :func:`byte_tokenizer`.

    An object's properties are generated in the order the schema lists them (llguidance's rule, and
    OpenAI's): a value is accepted when the constraint lets it be written with its keys in some order,
    found depth first (:func:`_members`)."""

    def __init__(self, compiled: CompiledSchema, tokenizer: llguidance.LLTokenizer) -> None:
        self.grammar = compiled.grammar
        self.tokenizer = tokenizer
        self.property_lists = _property_lists(compiled.enforced)
        self._start: llguidance.LLMatcher | None = None

    def accepts(self, value: Any, spacing: Spacing) -> bool:
        """Whether the constraint lets ``value`` be generated, whole, written with ``spacing``."""
        ordered = _ordered(value, self.property_lists)
        text = json.dumps(
            ordered, ensure_ascii=False, separators=(spacing.item, spacing.key), indent=spacing.indent
        )
        matcher = self._matcher()
        if _feed(matcher, text) and matcher.is_accepting():
            return True  # in the schema's order: most instances, in one pass
        written = _write(self._matcher(), ordered, spacing, 0, [MAX_ORDERS])
        return written is not None and written.is_accepting()

    def _matcher(self) -> llguidance.LLMatcher:
        """A matcher at the start of the grammar: a copy of one built once, as building one reads the grammar
        anew each time (a few milliseconds; a copy, microseconds) and each instance takes several."""
        if self._start is None:
            matcher = llguidance.LLMatcher(self.tokenizer, self.grammar, limits=parser_limits(), log_level=0)
            if matcher.is_error():
                raise ValueError(matcher.get_error())
            self._start = matcher
        return self._start.deep_copy()


def _property_lists(schema: Any) -> list[list[str]]:
    """The names of every ``properties`` in ``schema``, each list in its schema's order."""
    lists: list[list[str]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            listed = node.get("properties")
            if isinstance(listed, dict) and listed:
                lists.append(list(listed))
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return lists


def _ordered(value: Any, lists: list[list[str]]) -> Any:
    """``value`` with every object's keys in the order of the ``properties`` that lists most of them (a
    name may stand at different places in different objects of one schema); names it does not list last,
    as they were. The order tried first."""
    if isinstance(value, list):
        return [_ordered(v, lists) for v in value]
    if isinstance(value, dict):
        names = set(value)
        best = max(lists, key=lambda listed: len(names.intersection(listed)), default=[])
        rank = {name: place for place, name in enumerate(best)}
        keys = sorted(value, key=lambda k: rank.get(k, len(rank)))
        return {k: _ordered(value[k], lists) for k in keys}
    return value


def _feed(matcher: llguidance.LLMatcher, text: str) -> bool:
    return matcher.consume_tokens(list(text.encode()))


def _write(
    matcher: llguidance.LLMatcher, value: Any, spacing: Spacing, level: int, budget: list[int]
) -> llguidance.LLMatcher | None:
    """``matcher`` after ``value`` (None: the constraint refuses it in every key order tried)."""
    if not isinstance(value, dict | list) or not value:
        for spelling in _spellings(value):
            trial = matcher.deep_copy()
            if _feed(trial, spelling):
                return trial
        return None
    inner = "" if spacing.indent is None else "\n" + " " * spacing.indent * (level + 1)
    close = "" if spacing.indent is None else "\n" + " " * spacing.indent * level
    item = spacing.item if spacing.indent is None else spacing.item.rstrip()
    if not _feed(matcher, "{" if isinstance(value, dict) else "["):
        return None
    if isinstance(value, list):
        for index, element in enumerate(value):
            if not _feed(matcher, (item if index else "") + inner):
                return None
            written = _write(matcher, element, spacing, level + 1, budget)
            if written is None:
                return None
            matcher = written
        return matcher if _feed(matcher, close + "]") else None
    return _members(matcher, value, list(value), spacing, level, first=True, budget=budget)


def _spellings(value: Any) -> list[str]:
    """The ways a model may write a scalar: as ``json.dumps`` does, and a float without an exponent
    (``0.000001`` for ``1e-06``) or, when whole, as an integer (``6000`` for ``6000.0``), the same value
    that JSON Schema's ``integer`` and llguidance's number ranges take."""
    spellings = [json.dumps(value, ensure_ascii=False)]
    if isinstance(value, float) and math.isfinite(value):
        if value.is_integer():
            spellings.append(str(int(value)))
        spellings.append(format(Decimal(repr(value)), "f"))
    return list(dict.fromkeys(spellings))


def _members(
    matcher: llguidance.LLMatcher,
    value: dict[str, Any],
    keys: list[str],
    spacing: Spacing,
    level: int,
    *,
    first: bool,
    budget: list[int],
) -> llguidance.LLMatcher | None:
    """``matcher`` after the members ``keys`` of ``value`` and the closing brace, in the first order of
    them the constraint takes (depth first; ``budget``: members left to try for the whole instance)."""
    inner = "" if spacing.indent is None else "\n" + " " * spacing.indent * (level + 1)
    if not keys:
        close = "" if spacing.indent is None else "\n" + " " * spacing.indent * level
        return matcher if _feed(matcher, close + "}") else None
    item = spacing.item if spacing.indent is None else spacing.item.rstrip()
    for key in keys:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        trial = matcher.deep_copy()
        member = ("" if first else item) + inner + json.dumps(key, ensure_ascii=False) + spacing.key
        written = _write(trial, value[key], spacing, level + 1, budget) if _feed(trial, member) else None
        if written is not None:
            rest = [k for k in keys if k != key]
            done = _members(written, value, rest, spacing, level, first=False, budget=budget)
            if done is not None:
                return done
    return None


@dataclass
class CaseResult:
    """One schema's outcome: served (or why not), its instances' checks, its compile time."""

    dataset: str
    name: str
    served: bool
    refusal: str = ""
    compile_ms: float = 0.0
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_stopped: int = 0
    #: (spacing, description, why) of each valid instance that was not accepted, each invalid one let through.
    misses: list[tuple[str, str, str]] = field(default_factory=list)


def read_cases(folder: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each case in ``folder``: its dataset, its name and its content."""
    for path in sorted(folder.glob("*.json")):
        dataset = path.stem.split("---", 1)[0]
        yield dataset, path.stem, json.loads(path.read_text(encoding="utf-8"))


def check_case(
    dataset: str, name: str, case: dict[str, Any], tokenizer: llguidance.LLTokenizer
) -> CaseResult:
    """Compile ``case``'s schema (uncached), then check each of its instances against the constraint (in
    every spacing of :data:`SPACINGS`) and the answer's validation."""
    clear_cache()
    started = time.perf_counter()
    try:
        compiled = compile_schema(case["schema"], param="response_format")
    except SnapllmError as exc:
        return CaseResult(dataset, name, served=False, refusal=exc.message)
    result = CaseResult(dataset, name, served=True, compile_ms=(time.perf_counter() - started) * 1000)
    constraint = Constraint(compiled, tokenizer)
    for test in case.get("tests", []):
        value = test["data"]
        violations = compiled.value_violations(value)
        description = str(test.get("description", ""))[:80]
        if not test["valid"] and violations:
            result.invalid += 1
            result.invalid_stopped += 1  # validation stops it, whatever the constraint lets through
            continue
        accepted = {name: constraint.accepts(value, spacing) for name, spacing in SPACINGS.items()}
        if test["valid"]:
            for spacing, ok in accepted.items():
                result.valid += 1
                if ok and not violations:
                    result.valid_accepted += 1
                else:
                    why = "constraint" if not ok else f"validation: {violations[0][:120]}"
                    result.misses.append((spacing, description, why))
        else:
            result.invalid += 1
            if violations or not any(accepted.values()):
                result.invalid_stopped += 1
            else:
                result.misses.append(("any", description, "invalid, let through"))
    return result


def mask_micros(compiled: CompiledSchema, tokenizer: llguidance.LLTokenizer, text: str) -> list[float]:
    """The time of each token's mask (µs) while ``text``, tokenized by ``tokenizer``, is generated."""
    matcher = llguidance.LLMatcher(tokenizer, compiled.grammar, limits=parser_limits(), log_level=0)
    times: list[float] = []
    for token in tokenizer.tokenize_str(text):
        started = time.perf_counter()
        matcher.compute_bitmask()
        times.append((time.perf_counter() - started) * 1e6)
        if not matcher.consume_token(token):
            break
    return times


@dataclass(frozen=True)
class DatasetRow:
    dataset: str
    schemas: int
    coverage: float
    valid_accepted: float
    invalid_stopped: float
    compile_p50_ms: float
    compile_p99_ms: float
    mask_us_per_token: float | None


def _share(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 100.0


def summarize(results: Sequence[CaseResult], masks: dict[str, list[float]]) -> list[DatasetRow]:
    """One row per dataset and one for all of them."""
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for result in results:
        groups[result.dataset].append(result)
    groups["all"] = list(results)
    masks = {**masks, "all": [t for times in masks.values() for t in times]}
    rows = []
    for dataset, group in groups.items():
        served = [r for r in group if r.served]
        compile_ms = Percentiles.of([r.compile_ms for r in served]) if served else None
        times = masks.get(dataset) or []
        rows.append(
            DatasetRow(
                dataset=dataset,
                schemas=len(group),
                coverage=_share(len(served), len(group)),
                valid_accepted=_share(sum(r.valid_accepted for r in served), sum(r.valid for r in served)),
                invalid_stopped=_share(
                    sum(r.invalid_stopped for r in served), sum(r.invalid for r in served)
                ),
                compile_p50_ms=compile_ms.p50 if compile_ms else 0.0,
                compile_p99_ms=compile_ms.p99 if compile_ms else 0.0,
                mask_us_per_token=sum(times) / len(times) if times else None,
            )
        )
    return rows


def render(rows: Sequence[DatasetRow]) -> str:
    header = ("dataset", "schemas", "coverage", "valid accepted", "invalid stopped", "compile p50/p99")
    header += ("mask",)
    lines = [
        (
            row.dataset,
            str(row.schemas),
            f"{row.coverage:.1f}%",
            f"{row.valid_accepted:.2f}%",
            f"{row.invalid_stopped:.2f}%",
            f"{row.compile_p50_ms:.1f}/{row.compile_p99_ms:.1f} ms",
            "-" if row.mask_us_per_token is None else f"{row.mask_us_per_token:.0f} µs/token",
        )
        for row in rows
    ]
    return columns(lines, header=header)


def _mask_tokenizer(byte_level: bool) -> llguidance.LLTokenizer:
    if byte_level:
        return byte_tokenizer()
    # Qwen3's tokenizer, as the test models fetch it: a real vocabulary of 151k tokens.
    return llguidance.LLTokenizer(str(QWEN3_TOKENIZER.tokenizer_json))


def run(args: argparse.Namespace) -> int:
    folder: Path = args.dir
    cases = list(read_cases(folder))
    if args.dataset:
        cases = [case for case in cases if case[0] in args.dataset]
    if not cases:
        print(f"snapllm bench schemas: no cases (*.json) in {folder}", file=sys.stderr)
        return 2
    tokenizer = byte_tokenizer()
    masking = None if args.no_mask else _mask_tokenizer(args.byte_masks)
    results: list[CaseResult] = []
    masks: dict[str, list[float]] = defaultdict(list)
    for dataset, name, case in cases:
        result = check_case(dataset, name, case, tokenizer)
        results.append(result)
        valid = [t["data"] for t in case.get("tests", []) if t["valid"]]
        if masking is not None and result.served and valid:
            compiled = compile_schema(case["schema"], param="response_format")
            masks[dataset].extend(mask_micros(compiled, masking, json.dumps(valid[0], ensure_ascii=False)))
    rows = summarize(results, masks)
    if args.json:
        print(json.dumps({"datasets": [asdict(row) for row in rows]}, indent=2))
    else:
        print(render(rows))
    if args.verbose:
        for result in results:
            if not result.served:
                print(f"refused {result.name}: {result.refusal[:300]}")
            for spacing, description, why in result.misses:
                print(f"miss {result.name} [{spacing}] {description}: {why}")
    return 0
