"""``snapllm eval tools``: the Berkeley Function Calling Leaderboard's cases (PyPI ``bfcl-eval``) sent to
OpenAI-compatible endpoints side by side, each answer scored by BFCL's own AST checker.

    snapllm eval tools --model qwen2.5-coder-0.5b                  # starts snapllm and llama-server on it
    snapllm eval tools --endpoint mine=http://127.0.0.1:3000/v1 --cases 10 --json tools.json

Each case is one chat completion with ``tools`` (BFCL's function documents as its OpenAI handler sends
them), at temperature 0. docs/evaluation.md says what each outcome means and what the models scored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from snapllm.errors import SnapllmError
from snapllm.system import available_cpus
from snapllm.text_table import columns
from snapllm_dev.bench.engine import settle_s
from snapllm_dev.bench.grammar import llama_server
from snapllm_dev.eval.bfcl import (
    CATEGORIES,
    ERROR,
    NO_CALL,
    OUTCOMES,
    PASSED,
    Case,
    Outcome,
    Reply,
    load_cases,
    reply_of,
    score,
)
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering
from snapllm_dev.local.s3 import free_port
from snapllm_dev.packaged_models import model_path, served_name

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"
#: How long a started server may take to answer its health check (the 1.5B's first start included).
START_TIMEOUT_S = 600.0
#: The longest ``SNAPLLM_INVOKE_TIMEOUT_S`` the router takes (below API Gateway's 30 s).
MAX_INVOKE_TIMEOUT_S = 29
#: The characters of an answer's text kept in a failure example.
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    model: str


@dataclass(frozen=True)
class Scored:
    """One case on one endpoint: what came back, its outcome and how long it took."""

    case: Case
    endpoint: str
    reply: Reply
    outcome: Outcome
    seconds: float


def ask(client: httpx.Client, endpoint: Endpoint, case: Case, *, max_tokens: int) -> Reply:
    """The endpoint's answer to ``case`` (an error as such: a status, a timeout, a body that is not JSON)."""
    body = {
        "model": endpoint.model,
        "messages": case.messages,
        "tools": case.tools,
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    try:
        response = client.post(f"{endpoint.base_url}/chat/completions", json=body)
    except httpx.HTTPError as exc:
        return Reply(error=f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return Reply(error=f"HTTP {response.status_code}: {response.text[:500]}")
    try:
        return reply_of(response.json())
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return Reply(error=f"unreadable answer ({exc}): {response.text[:500]}")


def evaluate(
    endpoints: list[Endpoint], cases: list[Case], *, max_tokens: int, timeout_s: float, settle: float = 0.0
) -> list[Scored]:
    """Every case on every endpoint in turn (case by case, so a run cut short compares the same cases); one
    line per case on stderr. ``settle``: the seconds paused after each request, while the server's worker
    threads still poll for work and would take the cores from the next one (:func:`settle_s`)."""
    scored: list[Scored] = []
    with httpx.Client(timeout=timeout_s) as client:
        for number, case in enumerate(cases, start=1):
            verdicts = []
            for endpoint in endpoints:
                started = time.perf_counter()
                reply = ask(client, endpoint, case, max_tokens=max_tokens)
                seconds = time.perf_counter() - started
                time.sleep(settle)
                outcome = score(case, reply)
                scored.append(Scored(case, endpoint.name, reply, outcome, seconds))
                verdicts.append(f"{endpoint.name} {outcome.kind} ({seconds:.1f} s)")
            print(f"[{number}/{len(cases)}] {case.id}: {', '.join(verdicts)}", file=sys.stderr, flush=True)
    return scored


def summary(scored: list[Scored]) -> dict[str, dict[str, dict[str, int]]]:
    """``{category: {endpoint: {outcome: count, "cases": n, "call in text": n}}}``."""
    result: dict[str, dict[str, dict[str, int]]] = {}
    for item in scored:
        counts = result.setdefault(item.case.category, {}).setdefault(item.endpoint, Counter())
        counts[item.outcome.kind] += 1
        counts["cases"] += 1
        counts["call in text"] += item.outcome.call_in_text
    return {
        category: {
            name: {key: counts[key] for key in ("cases", *OUTCOMES, "call in text")}
            for name, counts in by.items()
        }
        for category, by in result.items()
    }


def render(totals: dict[str, dict[str, dict[str, int]]]) -> str:
    """The table: a row per category and endpoint, a column per outcome."""
    rows = []
    for category, by_endpoint in totals.items():
        for name, counts in by_endpoint.items():
            no_call = str(counts[NO_CALL]) + (
                f" ({counts['call in text']} in text)" if counts["call in text"] else ""
            )
            rows.append(
                (
                    category,
                    name,
                    f"{counts[PASSED]}/{counts['cases']}",
                    no_call,
                    *(counts[kind] for kind in OUTCOMES[2:]),
                )
            )
    return columns(rows, header=("category", "endpoint", *OUTCOMES), rule=True, right=range(2, 7))


def _shown(reply: Reply) -> str:
    if reply.error is not None:
        return reply.error[:EXAMPLE_CHARS]
    calls = "; ".join(f"{name}({arguments})" for name, arguments in reply.calls)
    text = (reply.content or "").strip().replace("\n", "\\n")
    return " | ".join(filter(None, [calls and f"calls: {calls}", text and f"text: {text}"]))[:EXAMPLE_CHARS]


def failures(scored: list[Scored], *, per_kind: int) -> str:
    """Up to ``per_kind`` failures of each kind on each endpoint: the case, why, what came back."""
    lines = []
    shown: Counter[tuple[str, str]] = Counter()
    for item in scored:
        kind = item.outcome.kind
        if kind == PASSED or shown[item.endpoint, kind] >= per_kind:
            continue
        shown[item.endpoint, kind] += 1
        lines.append(f"{item.endpoint}, {kind}: {item.case.id}: {item.outcome.detail}")
        lines.append(f"    {_shown(item.reply)}")
    return "\n".join(lines)


def as_json(scored: list[Scored], endpoints: list[Endpoint], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "benchmark": "bfcl-eval (Berkeley Function Calling Leaderboard)",
        "model": args.model,
        "cases_per_category": args.cases,
        "max_tokens": args.max_tokens,
        "endpoints": {endpoint.name: asdict(endpoint) for endpoint in endpoints},
        "summary": summary(scored),
        "cases": [
            {
                "id": item.case.id,
                "category": item.case.category,
                "endpoint": item.endpoint,
                "outcome": item.outcome.kind,
                "detail": item.outcome.detail,
                "call_in_text": item.outcome.call_in_text,
                "content": item.reply.content,
                "calls": [{"name": name, "arguments": arguments} for name, arguments in item.reply.calls],
                "finish_reason": item.reply.finish_reason,
                "error": item.reply.error,
                "seconds": round(item.seconds, 3),
                "messages": item.case.messages,
                "tools": item.case.tools,
            }
            for item in scored
        ],
    }


@contextlib.contextmanager
def snapllm_server(
    model: Path, *, threads: int, n_ctx: int, max_tokens: int, timeout_s: float
) -> Iterator[str]:
    """``snapllm local serve`` on ``model`` (its streaming function left out), as a user starts it; yields
    its base URL. Its output goes to a file, whose end is shown if it fails to start."""
    port = free_port()
    env = {
        **os.environ,
        "SNAPLLM_THREADS": str(threads),
        "SNAPLLM_N_CTX": str(n_ctx),
        "SNAPLLM_MAX_TOKENS": str(max(max_tokens, 512)),
        # The most the router allows (API Gateway's 30 s bounds it): a case on a slow machine takes long.
        "SNAPLLM_INVOKE_TIMEOUT_S": str(min(int(timeout_s), MAX_INVOKE_TIMEOUT_S)),
    }
    command = [
        sys.executable, "-m", "snapllm_dev.cli", "local", "serve", "--port", str(port), "-t", str(TEMPLATE),
        "--model", str(model), "--no-stream",
    ]  # fmt: skip
    with tempfile.NamedTemporaryFile(prefix="snapllm-eval-serve-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_answering(process, f"{url}/health", timeout_s=START_TIMEOUT_S):
            tail = Path(log.name).read_text(errors="replace")[-2000:]
            raise SnapllmError(f"snapllm local serve did not start (its output, {log.name}):\n{tail}")
        yield f"{url}/v1"
    finally:
        stop_process(process, timeout_s=20)


def _first_model(base_url: str) -> str:
    """The first model an endpoint lists (``GET /models``), or "default" where it lists none."""
    try:
        listed = httpx.get(f"{base_url}/models", timeout=30).json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        listed = []
    return str(listed[0].get("id")) if listed and isinstance(listed[0], dict) else "default"


@contextlib.contextmanager
def _endpoints(args: argparse.Namespace) -> Iterator[list[Endpoint]]:
    """The endpoints given, and the servers started on ``--model`` (stopped afterwards)."""
    serve = args.serve or ([] if args.endpoint else ["snapllm", "llama-server"])
    endpoints = []
    with contextlib.ExitStack() as stack:
        path = model_path(args.model) if serve else None
        threads = args.threads or available_cpus()
        for name in serve:
            assert path is not None
            if name == "snapllm":
                url = stack.enter_context(
                    snapllm_server(
                        path,
                        threads=threads,
                        n_ctx=args.n_ctx,
                        max_tokens=args.max_tokens,
                        timeout_s=args.timeout,
                    )
                )
                model = args.request_model or served_name(path)
            else:
                options = ["-np", "1", "--jinja"]
                root = stack.enter_context(
                    llama_server(path, threads=threads, n_ctx=args.n_ctx, options=options, bench="eval tools")
                )
                url, model = f"{root}/v1", args.request_model or served_name(path)
            endpoints.append(Endpoint(name, url, model))
        for name, url in args.endpoint:
            base_url = url.rstrip("/")
            endpoints.append(Endpoint(name, base_url, args.request_model or _first_model(base_url)))
        yield endpoints


def run(args: argparse.Namespace) -> int:
    categories = args.category or list(CATEGORIES)
    cases = [case for category in categories for case in load_cases(category, args.cases)]
    try:
        with _endpoints(args) as endpoints:
            names = ", ".join(f"{endpoint.name} ({endpoint.base_url})" for endpoint in endpoints)
            print(f"snapllm eval tools: {len(cases)} cases on {names}", file=sys.stderr, flush=True)
            settle = settle_s(args.threads or available_cpus()) if len(endpoints) > 1 else 0.0
            scored = evaluate(
                endpoints, cases, max_tokens=args.max_tokens, timeout_s=args.timeout, settle=settle
            )
    except SnapllmError as exc:
        print(f"snapllm eval tools: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(scored, endpoints, args), indent=2) + "\n")
    title = (
        f"{Path(args.model).name}: BFCL cases at temperature 0, {args.cases} per category, "
        f"max_tokens {args.max_tokens}"
    )
    print(f"{title}\n{render(summary(scored))}")
    shown = failures(scored, per_kind=args.examples)
    if shown:
        print(f"\nfailures (at most {args.examples} of each kind per endpoint):\n{shown}")
    return 1 if any(item.outcome.kind == ERROR for item in scored) else 0
