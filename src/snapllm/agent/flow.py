"""The agent's durable flow. Every side effect runs inside a named durable operation.

::

    inspect documents (map: one S3 HEAD per document)
    plan              (step: the model drafts a plan)
    run tools         (map: read_excerpt + summarize_chunk per document chunk)
    approval          (callback, with a timeout) + request approval (step: writes the review to S3)
    answer            (step: the model answers from the plan and the findings)

Each resume re-runs :func:`run_agent` from the top; finished operations return their checkpointed
results, so the control flow below depends only on the input and on durable results. Every step result
goes through :class:`~snapllm.agent.budget.StateBudget` before it is checkpointed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_durable_execution_sdk_python import (
    CallbackError,
    CallbackTimeoutError,
    DurableContext,
    StepContext,
)
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    Duration,
    MapConfig,
    StepConfig,
)
from aws_durable_execution_sdk_python.exceptions import DurableOperationError, StepError
from aws_durable_execution_sdk_python.serdes import JsonSerDes

from snapllm.agent.artifacts import ArtifactStore
from snapllm.agent.budget import BatchJsonSerDes, StateBudget, run_id_from_arn
from snapllm.agent.errors import AgentError, agent_error_class
from snapllm.agent.llm import chat
from snapllm.agent.operations import APPROVAL_CALLBACK
from snapllm.agent.request import AgentRequest
from snapllm.agent.retry import RETRY, RetryStrategy
from snapllm.agent.settings import AgentSettings
from snapllm.agent.tools import ToolContext, ToolRegistry
from snapllm.inference_client import InferenceClient

JSON = JsonSerDes()
BATCH_JSON = BatchJsonSerDes()
# Text of earlier results that goes into a prompt: the model's context is small and so are its answers.
_PROMPT_SNIPPET_CHARS = 300


@dataclass(frozen=True)
class AgentDependencies:
    """What the flow talks to; the handler builds it from the environment, tests build it directly."""

    settings: AgentSettings
    store: ArtifactStore
    inference: InferenceClient
    tools: ToolRegistry

    @property
    def tool_context(self) -> ToolContext:
        return ToolContext(store=self.store, inference=self.inference, settings=self.settings)


def _step(
    context: DurableContext,
    name: str,
    body: Callable[[StepContext], Any],
    *,
    retry: RetryStrategy,
    budget: StateBudget,
) -> Any:
    try:
        return context.step(
            lambda step_context: budget.fit(name, body(step_context)),
            name=name,
            config=StepConfig(retry_strategy=retry, serdes=JSON),
        )
    except StepError as exc:
        # Re-raised as the agent's own error, so a map item or the run that fails with it records its
        # type. The StepError is rebuilt from the checkpoint, so a replay raises the same error.
        raise agent_failure(exc) or exc from None


def agent_failure(exc: BaseException | None) -> AgentError | None:
    """The agent error inside a chain of durable operation errors, rebuilt from its type and message."""
    while isinstance(exc, DurableOperationError):
        failure = agent_error_class(exc.error_type)
        if failure is not None:
            return failure(exc.message or failure.code)
        exc = exc.__cause__
    return None


def _doc_name(uri: str) -> str:
    return posixpath.basename(uri)


def run_agent(event: Any, context: DurableContext, deps: AgentDependencies) -> dict[str, Any]:
    settings = deps.settings
    request = AgentRequest.parse(event, max_documents=settings.max_documents)
    budget = StateBudget(
        deps.store,
        limit_bytes=settings.state_budget_bytes,
        run_id=run_id_from_arn(context.execution_context.durable_execution_arn),
    )
    budget.require("the run's input", event)
    for uri in request.documents:
        deps.store.document(uri)  # refuses URIs outside the agent's prefix before any request

    documents = _inspect_documents(context, request, deps, budget)
    plan = _plan(context, request, documents, deps, budget)
    findings = _run_tools(context, documents, deps, budget)

    approval: dict[str, Any] = {"required": request.approval.required}
    if request.approval.required:
        decision = _await_approval(context, request, plan, findings, deps, budget)
        approval.update(decision)
        if not decision["approved"]:
            return budget.fit(
                "result",
                {
                    "status": "cancelled",
                    "reason": decision["reason"],
                    "task": request.task,
                    "plan": plan["text"],
                    "approval": approval,
                },
            )

    answer = _step(
        context,
        "answer",
        lambda _: _answer(request, plan, findings, deps, budget),
        retry=RETRY["inference"],
        budget=budget,
    )
    return budget.fit(
        "result",
        {
            "status": "completed",
            "task": request.task,
            "plan": plan["text"],
            "answer": answer["text"],
            "findings": [
                {"uri": f["uri"], "offset": f["offset"], "summary": f["summary"]}
                for f in findings
                if f["tool"] == "summarize_chunk"
            ],
            "approval": approval,
        },
    )


def _inspect_documents(
    context: DurableContext, request: AgentRequest, deps: AgentDependencies, budget: StateBudget
) -> list[dict[str, Any]]:
    if not request.documents:
        return []

    def inspect(ctx: DurableContext, uri: str, index: int, _items: Any) -> dict[str, Any]:
        def head(_: StepContext) -> dict[str, Any]:
            info = deps.store.head(deps.store.document(uri))
            return {"uri": uri, "size": info.size, "content_type": info.content_type, "etag": info.etag}

        return _step(ctx, f"head {_doc_name(uri)}", head, retry=RETRY["storage"], budget=budget)

    batch = context.map(
        request.documents,
        inspect,
        name="inspect documents",
        config=MapConfig(
            max_concurrency=4,
            item_namer=lambda uri, index: f"inspect {index}:{_doc_name(uri)}",
            item_serdes=JSON,
            serdes=BATCH_JSON,
        ),
    )
    batch.throw_if_error()
    return batch.get_results()


def _plan(
    context: DurableContext,
    request: AgentRequest,
    documents: list[dict[str, Any]],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    listing = "\n".join(f"- {_doc_name(d['uri'])} ({d['size']} bytes)" for d in documents) or "- none"

    def plan(_: StepContext) -> dict[str, Any]:
        reply = chat(
            deps.inference,
            system="You are a careful assistant. Write a short numbered plan of at most three steps.",
            user=f"Task: {request.task}\nDocuments:\n{listing}\nPlan:",
            max_tokens=deps.settings.plan_max_tokens,
        )
        return {"text": reply.text, "tokens": reply.completion_tokens}

    return _step(context, "plan", plan, retry=RETRY["inference"], budget=budget)


def tool_calls(documents: list[dict[str, Any]], settings: AgentSettings) -> list[dict[str, Any]]:
    """The tool calls for the documents: an opening excerpt, and chunk summaries spread evenly over
    each document (so a 10 MB document costs ``chunks_per_document`` model calls, not thousands)."""
    calls: list[dict[str, Any]] = []
    for doc in documents:
        size = int(doc["size"])
        calls.append(
            {
                "tool": "read_excerpt",
                "args": {"uri": doc["uri"], "offset": 0, "length": max(1, min(settings.excerpt_bytes, size))},
            }
        )
        chunk = min(settings.chunk_bytes, size)
        count = 1 if size <= settings.chunk_bytes else settings.chunks_per_document
        span = max(size - chunk, 0)
        offsets = sorted({(span * i) // max(count - 1, 1) for i in range(count)})
        calls.extend(
            {"tool": "summarize_chunk", "args": {"uri": doc["uri"], "offset": at, "length": max(chunk, 1)}}
            for at in offsets
        )
    return calls


def _run_tools(
    context: DurableContext, documents: list[dict[str, Any]], deps: AgentDependencies, budget: StateBudget
) -> list[dict[str, Any]]:
    calls = tool_calls(documents, deps.settings)
    if not calls:
        return []

    def call_name(call: dict[str, Any], _index: int) -> str:
        return f"{call['tool']} {_doc_name(call['args']['uri'])}@{call['args']['offset']}"

    # The map's own result lists every item, so each item gets an equal share of the budget: a tool
    # result over its share is offloaded inside its step and the whole list still fits the budget.
    item_budget = budget.share(len(calls))

    def run(ctx: DurableContext, call: dict[str, Any], index: int, _items: Any) -> dict[str, Any]:
        tool = deps.tools.get(call["tool"])
        result = _step(
            ctx,
            call_name(call, index),
            lambda _: deps.tools.call(call["tool"], call["args"], deps.tool_context),
            retry=RETRY[tool.retry_class],
            budget=item_budget,
        )
        return result

    batch = context.map(
        calls,
        run,
        name="run tools",
        config=MapConfig(max_concurrency=4, item_namer=call_name, item_serdes=JSON, serdes=BATCH_JSON),
    )
    batch.throw_if_error()
    # Items come back in call order; the call (tool, uri, range) is known, so items carry only results.
    findings = []
    for call, result in zip(calls, batch.get_results(), strict=True):
        summary = result.get("summary", "") if isinstance(result, dict) else ""
        findings.append({"tool": call["tool"], **call["args"], "summary": summary, "excerpt": result})
    return findings


def _await_approval(
    context: DurableContext,
    request: AgentRequest,
    plan: dict[str, Any],
    findings: list[dict[str, Any]],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """Wait (at no cost: the function is not running) for a person to approve or reject."""
    timeout_s = request.approval.timeout_s
    callback = context.create_callback(
        name=APPROVAL_CALLBACK,
        config=CallbackConfig(timeout=Duration.from_seconds(timeout_s), serdes=JSON),
    )

    def request_approval(_: StepContext) -> dict[str, Any]:
        # The reviewer reads this document; the run's state only keeps its reference.
        review = {
            "callback_id": callback.callback_id,
            "task": request.task,
            "plan": plan["text"],
            "findings": [{"uri": f["uri"], "offset": f["offset"], "summary": f["summary"]} for f in findings],
            "timeout_s": timeout_s,
        }
        return {"review": deps.store.put_json(f"runs/{budget.run_id}/approval-request.json", review)}

    _step(context, "request approval", request_approval, retry=RETRY["storage"], budget=budget)
    try:
        decision = callback.result()
    except CallbackTimeoutError:
        return {"approved": False, "reason": f"approval timed out after {_human_seconds(timeout_s)}"}
    except CallbackError as exc:
        return {"approved": False, "reason": f"approval failed: {exc}"}
    return _decision(decision)


def _decision(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        return {"approved": False, "reason": "the approval answer was malformed; treated as a rejection"}
    approver = str(payload.get("approver") or "the approver")[:100]
    note = str(payload.get("reason") or payload.get("comment") or "")[:500]
    if payload["approved"]:
        return {"approved": True, "approver": approver, "reason": note}
    reason = f"rejected by {approver}: {note or 'no reason given'}"
    return {"approved": False, "approver": approver, "reason": reason}


def _answer(
    request: AgentRequest,
    plan: dict[str, Any],
    findings: list[dict[str, Any]],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    lines = []
    for f in findings:
        if f["tool"] == "summarize_chunk" and f["summary"]:
            lines.append(f"- {_doc_name(f['uri'])}: {f['summary'][:_PROMPT_SNIPPET_CHARS]}")
        elif f["tool"] == "read_excerpt":
            # An offloaded excerpt comes back from S3 here, inside the step, and only a snippet is used.
            excerpt = budget.resolve(f["excerpt"])
            lines.append(f"- {_doc_name(f['uri'])} opens with: {excerpt['text'][:160].strip()}")
    notes = "\n".join(lines) or "- no documents"
    reply = chat(
        deps.inference,
        system="You are a concise assistant. Answer in two or three sentences.",
        user=f"Task: {request.task}\nPlan:\n{plan['text'][:_PROMPT_SNIPPET_CHARS]}\nNotes:\n{notes}\nAnswer:",
        max_tokens=deps.settings.answer_max_tokens,
    )
    return {"text": reply.text, "tokens": reply.completion_tokens}


def _human_seconds(seconds: int) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"
