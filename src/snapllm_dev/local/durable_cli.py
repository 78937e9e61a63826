"""``snapllm local invoke AgentFunction -e events/agent/review.json --approve``: any function with
``DurableConfig`` in the template.

Runs one real durable execution in this process (see :mod:`snapllm_dev.local.durable`). Files in the
``documents/`` folder next to the event are uploaded under the agent's prefix first, so the event can
name them as ``s3://snapllm-models-local/agent/documents/<file>``. The result JSON goes to stdout; the
function's logs and the per-operation table go to stderr. Without ``--approve``/``--reject`` the
approval is asked for on the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from snapllm.agent.flow import describe_step
from snapllm.agent.handler import LOGGER
from snapllm.errors import RequestError, SnapllmError
from snapllm.protocol.http.edge import decode_json
from snapllm_dev.local.durable import Decider, LocalAgent, agent_settings, approve, reject, with_mcp_servers
from snapllm_dev.sam import Function, Template


def _read_event(path: Path | None) -> dict[str, Any]:
    if path is None:
        raise SnapllmError("an agent run needs an event: -e events/agent/review.json")
    try:
        event = decode_json(sys.stdin.read() if str(path) == "-" else path.read_text())
    except (OSError, RequestError) as exc:
        raise SnapllmError(f"cannot read the event {path}: {exc}") from exc
    if not isinstance(event, dict):
        raise SnapllmError(f"{path} must hold a JSON object")
    return event


def _ask(review: dict[str, Any]) -> dict[str, Any]:
    print("\n--- approval requested ---", file=sys.stderr)
    print(f"task: {review.get('task')}", file=sys.stderr)
    if review.get("kind") == "tool_call":
        print(
            f"step {review['step']} calls {review['server_tool']} on {review['server']} with:",
            file=sys.stderr,
        )
        print(json.dumps(review["arguments"], indent=2, ensure_ascii=False), file=sys.stderr)
    else:
        print("plan:", file=sys.stderr)
        for number, step in enumerate(review.get("plan", []), 1):
            print(f"  {number}. {describe_step(step)}", file=sys.stderr)
        for finding in review.get("findings", []):
            print(f"  - {describe_step(finding)}: {finding['preview'][:200]}", file=sys.stderr)
    answer = input("approve? [y/N] ").strip().lower()
    reason = input("comment: ").strip()
    return {"approved": answer in {"y", "yes"}, "approver": "terminal", "reason": reason}


def _decider(args: argparse.Namespace) -> Decider:
    if args.approve:
        return approve("cli", args.reason or "approved with --approve")
    if args.reject:
        return reject("cli", args.reason or "rejected with --reject")
    if not sys.stdin.isatty():
        raise SnapllmError("pass --approve or --reject (stdin is not a terminal to ask on)")
    return _ask


@contextlib.contextmanager
def _run_log() -> Iterator[None]:
    """The run's log (``snapllm.agent``: each model call's prompt and cached tokens) on stderr, at
    ``SNAPLLM_LOG_LEVEL`` (INFO by default), as the function's log would show it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    level = LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(os.environ.get("SNAPLLM_LOG_LEVEL", "INFO").upper())
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)


def invoke_durable(args: argparse.Namespace, template: Template, function: Function) -> int:
    """Entry point from ``snapllm local invoke`` for a function with ``DurableConfig``."""
    try:
        event = _read_event(args.event)
        decide = _decider(args)
        overrides = with_mcp_servers(dict(args.env), args.mcp)
        settings = agent_settings(template, function, **overrides)
        with LocalAgent.start(
            template, function, model_path=args.model, inference_timeout_s=args.timeout
        ) as agent:
            if str(args.event) != "-":
                agent.upload_documents(args.event.parent / "documents")
            with _run_log():
                run = agent.run(event, decide=decide, settings=settings)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm local invoke: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(run.output if run.error is None else {"error": run.error}, indent=2))
    print(f"\nexecution {run.status} in {run.duration_s:.2f} s\n{run.report.render()}", file=sys.stderr)
    return 0 if run.status == "SUCCEEDED" else 1
