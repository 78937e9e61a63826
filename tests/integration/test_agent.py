"""The durable agent end to end: the SDK's testing runner plays the durable service, the real model
answers (SmolLM2 restored from its local snapshot) and documents live on the local S3 endpoint.

One restored inference environment serves the whole module, and one approved run with the template's
settings serves the tests of what the model plans and of what a replay runs again. A test about the
approval gate offers no tools, so the model plans nothing before it. Each test checks the per-operation
report: no checkpointed operation may exceed the configured state budget.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from snapllm.agent.budget import OFFLOADED
from snapllm.agent.flow import PROMPT_SNIPPET_CHARS
from snapllm.agent.tools import BuiltinTools, ReadExcerpt
from snapllm.errors import InferenceThrottledError
from snapllm_dev.local.durable import LocalAgent, LocalRun, approve, no_answer, reject
from tests.support.agent import AGENT_GROUP, SHORT_ANSWER_TOKENS, CountingHandler

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(AGENT_GROUP)]

NOTES = (
    "# SnapStart notes\n\n"
    "Lambda SnapStart takes a snapshot of the initialized execution environment when a version is "
    "published. Restoring from the snapshot skips module import and model loading, so the first request "
    "only pays for paging memory back in. Snapshots hold everything in memory, including random seeds, "
    "so seed per request after restore.\n"
)


@pytest.fixture(scope="module")
def notes_uri(agent: LocalAgent) -> str:
    return _put(agent, "documents/snapstart-notes.md", NOTES.encode())


def _put(agent: LocalAgent, relative_key: str, data: bytes) -> str:
    key = f"{agent.settings.artifacts_prefix}{relative_key}"
    agent.deployment.s3.client().put_object(Bucket=agent.settings.artifacts_bucket, Key=key, Body=data)
    return f"s3://{agent.settings.artifacts_bucket}/{key}"


def _event(uri: str, *, required: bool = True, timeout: str = "3d") -> dict[str, Any]:
    return {
        "task": "Explain in two sentences why SnapStart makes cold starts faster.",
        "documents": [uri],
        "approval": {"required": required, "timeout": timeout},
    }


def _within_budget(run: LocalRun) -> None:
    print(run.report.render())
    assert run.report.over_budget == [], run.report.render()
    assert run.report.largest.bytes <= run.report.budget_bytes


def _ops(run: LocalRun) -> dict[str, Any]:
    return {row.name: row for row in run.report.rows}


class CountingInference:
    """The real model, counting calls; optionally failing the first ones like a throttled Lambda invoke.

    Lambda's throttling (429 TooManyRequestsException) cannot happen against the local restored
    environment, so the first ``throttle_first`` calls raise what LambdaInferenceClient raises for it.
    """

    def __init__(self, inner: Any, *, throttle_first: int = 0) -> None:
        self._inner = inner
        self._throttle_first = throttle_first
        self.calls = 0
        self.throttled = 0
        self.prompts: list[str] = []

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        if self.throttled < self._throttle_first:
            self.throttled += 1
            raise InferenceThrottledError("the model is at its concurrency limit; retry shortly")
        self.calls += 1
        self.prompts.append(payload["messages"][-1]["content"][:60])
        return self._inner.invoke(payload, deadline=deadline)


@dataclass
class CountedRun:
    run: LocalRun
    inference: CountingInference
    invocations: int


@pytest.fixture(scope="module")
def approved(agent: LocalAgent, notes_uri: str) -> CountedRun:
    """A run approved by alice, its model calls and handler invocations counted (both pass through)."""
    inference, handler = CountingInference(agent.inference), CountingHandler()
    run = agent.run(
        _event(notes_uri),
        decide=approve("alice", "looks right"),
        inference=inference,
        wrap_handler=handler,
        execution_name="approve",
    )
    return CountedRun(run, inference, handler.invocations)


def test_approved_run_answers_with_the_real_model(agent: LocalAgent, notes_uri: str, approved: CountedRun):
    run = approved.run

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed"
    assert run.output["answer"].strip()
    # The plan is JSON the grammar kept to real tools and the run's documents.
    plan = run.output["plan"]
    assert 1 <= len(plan) <= agent.settings.max_tool_calls
    for step in plan:
        assert step["tool"] in {"read_excerpt", "summarize_chunk"}
        assert step["arguments"]["uri"] == notes_uri
    assert run.output["approval"] == {
        "required": True,
        "approved": True,
        "approver": "alice",
        "reason": "looks right",
    }
    findings = run.output["findings"]
    assert [f["tool"] for f in findings] == [step["tool"] for step in plan]
    assert all(f["preview"].strip() and not f["is_error"] for f in findings)
    ops = _ops(run)
    for number, step in enumerate(plan, 1):
        assert ops[f"choose call {number}"].status == "SUCCEEDED"
        assert ops[f"call {number} {step['tool']}"].type == "STEP"
    assert ops["approval"].type == "CALLBACK" and ops["approval"].status == "SUCCEEDED"
    assert ops["answer"].status == "SUCCEEDED"
    _within_budget(run)


def test_rejected_run_is_cancelled_with_the_reason(agent: LocalAgent, notes_uri: str):
    run = agent.run(
        _event(notes_uri), decide=reject("bob", "not for this audience"), tools=[], execution_name="reject"
    )

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "cancelled"
    assert run.output["reason"] == "rejected by bob: not for this audience"
    assert "answer" not in _ops(run)
    _within_budget(run)


def test_approval_timeout_cancels_the_run(agent: LocalAgent, notes_uri: str):
    # The testing runner fast-forwards waits and retry delays but times callbacks out in real time.
    run = agent.run(_event(notes_uri, timeout="2s"), decide=no_answer(), tools=[], execution_name="timeout")

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "cancelled"
    assert run.output["reason"] == "approval timed out after 2 seconds"
    assert _ops(run)["approval"].status == "TIMED_OUT"
    assert "answer" not in _ops(run)
    _within_budget(run)


def test_transient_inference_failure_is_retried(agent: LocalAgent, notes_uri: str):
    inference = CountingInference(agent.inference, throttle_first=1)
    # No tools, so the answer is the run's one model call (every model call has the same retry rule).
    settings = agent.with_settings(answer_max_tokens=SHORT_ANSWER_TOKENS)
    event = _event(notes_uri, required=False)
    run = agent.run(event, settings=settings, inference=inference, tools=[], execution_name="throttled")

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed"
    assert inference.throttled == 1
    assert _ops(run)["answer"].attempts == 2  # the first attempt was throttled, the second answered
    _within_budget(run)


def test_missing_document_fails_permanently_without_retries(agent: LocalAgent):
    inference = CountingInference(agent.inference)
    missing = f"s3://{agent.settings.artifacts_bucket}/{agent.settings.artifacts_prefix}documents/missing.md"
    run = agent.run(_event(missing), inference=inference, execution_name="missing")

    assert run.status == "FAILED"
    assert run.error["ErrorMessage"] == f"{missing} does not exist"
    # The run fails with the agent's own error, not the map item's wrapper (ChildContextError).
    assert run.error["ErrorType"] == "snapllm.agent.errors.DocumentNotFoundError"
    assert _ops(run)["head missing.md"].attempts == 1  # a missing object is not worth a retry
    assert inference.calls == 0
    _within_budget(run)


def test_model_rejection_fails_permanently_without_retries(agent: LocalAgent, notes_uri: str):
    # The deployment caps max_tokens at 512: the real inference function answers 400, which no retry fixes.
    settings = agent.with_settings(plan_max_tokens=100_000)
    run = agent.run(_event(notes_uri, required=False), settings=settings, execution_name="rejected")

    assert run.status == "FAILED"
    assert "the model rejected the request (400)" in run.error["ErrorMessage"]
    assert "max_tokens" in run.error["ErrorMessage"]
    assert _ops(run)["plan"].attempts == 1
    _within_budget(run)


def test_replay_runs_each_step_body_once(approved: CountedRun):
    run, inference = approved.run, approved.inference

    assert run.status == "SUCCEEDED", run.error
    # Waiting for the approval ends the first invocation; the second replays everything before it.
    assert approved.invocations >= 2
    llm_steps = [
        r
        for r in run.report.rows
        if r.type == "STEP"
        and (r.name in ("plan", "answer") or r.name.startswith("choose call") or "summarize" in r.name)
    ]
    # the plan, one tool call per step (and a summary per summarize_chunk call), the answer: once each
    assert inference.calls == len(llm_steps) >= 4, inference.prompts
    assert all(r.attempts == 1 for r in run.report.rows if r.type == "STEP")
    _within_budget(run)


def test_ten_megabyte_document_stays_out_of_the_checkpoints(agent: LocalAgent, tmp_path: Path):
    section = (
        "Durable functions checkpoint every step result and replay them on resume, so results must stay "
        "small. Large data belongs in S3, referenced by bucket, key, size and digest.\n"
    )
    data = (section * (10 * 1024 * 1024 // len(section) + 1)).encode()[: 10 * 1024 * 1024]
    uri = _put(agent, "documents/big.txt", data)
    # A small budget and a large excerpt force the guard to offload: the excerpt (32 KiB) is over the
    # share of the budget its map item gets, so only its reference may be checkpointed.
    settings = agent.with_settings(
        state_budget_bytes=16 * 1024,
        excerpt_bytes=32 * 1024,
        max_tool_calls=1,
        answer_max_tokens=SHORT_ANSWER_TOKENS,
    )
    # Only read_excerpt is offered, so the one call the plan may make reads the excerpt.
    tools = [BuiltinTools([ReadExcerpt()])]
    run = agent.run(_event(uri, required=False), settings=settings, tools=tools, execution_name="big")

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed" and run.output["answer"].strip()
    _within_budget(run)
    assert run.report.budget_bytes == 16 * 1024
    assert run.report.total_bytes < 64 * 1024  # 10 MB processed, a few KB of state

    excerpt = next(
        op
        for op in run.test_result.get_all_operations()
        if op.name == "call 1 read_excerpt" and op.operation_type.value == "STEP"
    )
    checkpointed = json.loads(excerpt.result)
    assert checkpointed["text_bytes"] == 32 * 1024 and len(checkpointed["preview"]) <= PROMPT_SNIPPET_CHARS
    ref = checkpointed["result"][OFFLOADED]
    stored = agent.deployment.s3.client().get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
    assert ref["size"] == len(stored) and ref["sha256"] == hashlib.sha256(stored).hexdigest()
    assert json.loads(stored)["data"]["length"] == 32 * 1024
    assert ref["key"].startswith(f"{agent.settings.artifacts_prefix}runs/")
