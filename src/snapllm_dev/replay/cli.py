"""``snapllm replay``: each event through its function, compared with the answer recorded beside it.

It runs the events on the local stack (:mod:`snapllm_dev.replay.runner`), masks what varies between runs
(:mod:`snapllm_dev.replay.masks`) and compares the rest with ``NAME.expected.json``; ``--update``
re-records. docs/testing.md ("Replay events") says what is compared and when a replay exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TextIO

from snapllm.errors import SnapllmError
from snapllm_dev import sam
from snapllm_dev.replay.events import Manifest, ReplayDeadlineError, ReplayEvent, ReplaySetupError
from snapllm_dev.replay.runner import Replayer


class Verdict(StrEnum):
    PASSED = "passed"
    FAILED = "FAILED"
    UNRECORDED = "UNRECORDED"
    UNUSABLE = "UNUSABLE"
    DEADLINE = "DEADLINE"
    RECORDED = "recorded"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Result:
    event: ReplayEvent
    verdict: Verdict
    seconds: float
    diff: str = ""


def render(document: Any) -> str:
    """The text a recording holds: indented, keys sorted, so a change is a small diff."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def diff(expected: str, answered: str, name: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True),
        answered.splitlines(keepends=True),
        fromfile=f"recorded {name}",
        tofile="answered now",
    )
    return "".join(lines)


# What in an answer says that a deadline cut it short: the engine's flag, the OpenAI error type of a
# timeout, and the error types an agent run records for one.
_DEADLINE_FLAG = "deadline_reached"
_TIMEOUT_ERROR_TYPES = ("timeout_error", "InferenceTimeoutError", "InferenceDeadlineError")


def deadlines(value: Any, path: str = "") -> list[str]:
    """Where ``value`` (an answer) says a deadline or a timeout cut it: ``["body.deadline_reached"]``."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == _DEADLINE_FLAG and item is True:
                found.append(where)
            elif isinstance(item, str) and any(item.endswith(kind) for kind in _TIMEOUT_ERROR_TYPES):
                found.append(f"{where} = {item}")
            else:
                found.extend(deadlines(item, where))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(deadlines(item, f"{path}[{index}]"))
    return found


def check(event: ReplayEvent, answer: Any, *, update: bool) -> tuple[Verdict, str]:
    """Compare ``answer`` with the event's recording (writing it instead, with ``update``). An answer a
    deadline cut, where the recording has none, is neither compared nor recorded: :attr:`Verdict.DEADLINE`."""
    answered = render(answer)
    path = event.expected_path
    recorded = path.read_text() if path.exists() else None
    if recorded is not None and json.loads(recorded) == answer:
        return (Verdict.UNCHANGED if update else Verdict.PASSED), ""
    cut = [
        where
        for where in deadlines(answer)
        if recorded is None or where not in deadlines(json.loads(recorded))
    ]
    if cut:
        return Verdict.DEADLINE, f"the answer was cut by a deadline on this machine ({', '.join(cut)})\n"
    change = diff(recorded or "", answered, path.name)
    if update:
        path.write_text(answered)
        return Verdict.RECORDED, change
    return (Verdict.FAILED if recorded is not None else Verdict.UNRECORDED), change


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        manifest = Manifest.load(args.events)
        events = manifest.events(args.paths)
        template = sam.load(args.template)
        # The functions log to stdout as on Lambda; keep stdout for the results.
        with contextlib.redirect_stdout(sys.stderr), manifest.pinned():
            results = _run(template, events, args, out)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm replay: {exc}", file=sys.stderr)
        return 2
    return _summarize(results, out, update=args.update)


def _run(
    template: sam.Template, events: list[ReplayEvent], args: argparse.Namespace, out: TextIO
) -> list[Result]:
    results = []
    with Replayer.start(template, events, model_path=args.model) as replayer:
        for event in events:
            started = time.perf_counter()
            try:
                verdict, change = check(event, replayer.answer(event), update=args.update)
            except ReplaySetupError as exc:
                verdict, change = Verdict.UNUSABLE, f"{exc}\n"
            except ReplayDeadlineError as exc:
                verdict, change = Verdict.DEADLINE, f"{exc}\n"
            result = Result(event, verdict, time.perf_counter() - started, change)
            print(f"{result.verdict:>10}  {event.name}  ({event.function}, {result.seconds:.2f} s)", file=out)
            if change:
                print(change, file=out)
            out.flush()
            results.append(result)
    return results


def _summarize(results: list[Result], out: TextIO, *, update: bool) -> int:
    failed = [
        r
        for r in results
        if r.verdict in {Verdict.FAILED, Verdict.UNRECORDED, Verdict.UNUSABLE, Verdict.DEADLINE}
    ]
    counts = {verdict: sum(r.verdict is verdict for r in results) for verdict in Verdict}
    print(
        f"\n{len(results)} events replayed: "
        + ", ".join(f"{count} {verdict.lower()}" for verdict, count in counts.items() if count),
        file=out,
    )
    for result in failed:
        if result.verdict is Verdict.UNUSABLE:
            print(f"  {result.event.name} cannot be replayed: {result.diff.strip()}", file=out)
            continue
        if result.verdict is Verdict.DEADLINE:
            print(
                f"  {result.event.name} reached a deadline after {result.seconds:.1f} s, so its answer is "
                f"not compared: {result.diff.strip()}. This machine was too slow or too loaded for it; "
                "replay it on a less loaded one",
                file=out,
            )
            continue
        how = "answered differently" if result.verdict is Verdict.FAILED else "has no recording"
        print(
            f"  {result.event.name} {how}: 'snapllm replay --update {result.event.path}' re-records it",
            file=out,
        )
    kept = {Verdict.UNUSABLE, Verdict.DEADLINE}  # what --update cannot record either
    return 1 if failed and (not update or any(r.verdict in kept for r in failed)) else 0
