"""The agent's durable flow (:func:`run_agent`): documents, tool lists, plan, tool calls, approval, answer.

Every side effect runs inside a named durable operation (docs/agents.md lists them). Each resume runs
:func:`run_agent` again from the top and finished operations return their checkpointed results, so its
control flow may depend only on the input and on durable results.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_durable_execution_sdk_python import (
    CallbackError,
    CallbackTimeoutError,
    DurableContext,
    StepContext,
)
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    ChildConfig,
    Duration,
    MapConfig,
    StepConfig,
    StepSemantics,
)
from aws_durable_execution_sdk_python.exceptions import DurableOperationError, StepError
from aws_durable_execution_sdk_python.serdes import JsonSerDes

from snapllm.agent import prompts
from snapllm.agent.artifacts import ArtifactStore
from snapllm.agent.budget import BatchJsonSerDes, StateBudget, run_id_from_arn
from snapllm.agent.errors import (
    AgentError,
    ModelAnswerIncompleteError,
    UnknownToolError,
    agent_error_class,
    bounded_failure,
)
from snapllm.agent.llm import ChatReply, chat, complete, complete_items, whole_sentences
from snapllm.agent.operations import APPROVAL_CALLBACK, review_document, tool_approval_callback
from snapllm.agent.request import AgentRequest
from snapllm.agent.retry import RETRY, RetryStrategy
from snapllm.agent.schemas import plan_schema, with_documents
from snapllm.agent.settings import AgentSettings
from snapllm.agent.tools import (
    BUILTIN,
    BuiltinTools,
    ToolContext,
    ToolSource,
    ToolSpec,
    require_unique_names,
)
from snapllm.inference.client import InferenceClient

JSON = JsonSerDes()
BATCH_JSON = BatchJsonSerDes()
# Text of earlier results that goes into a prompt: the model's context is small and so are its answers.
PROMPT_SNIPPET_CHARS = 640


@dataclass(frozen=True)
class AgentDependencies:
    """What the flow talks to; the handler builds it from the environment, tests build it directly."""

    settings: AgentSettings
    store: ArtifactStore
    inference: InferenceClient
    tools: Sequence[ToolSource] = field(default_factory=lambda: (BuiltinTools(),))

    @property
    def tool_context(self) -> ToolContext:
        return ToolContext(store=self.store, inference=self.inference, settings=self.settings)

    def source(self, name: str) -> ToolSource:
        for source in self.tools:
            if source.name == name:
                return source
        raise UnknownToolError(f"no tool source named {name!r}")


def _step(
    context: DurableContext,
    name: str,
    body: Callable[[StepContext], Any],
    *,
    retry: RetryStrategy,
    budget: StateBudget,
    semantics: StepSemantics = StepSemantics.AT_LEAST_ONCE_PER_RETRY,
) -> Any:
    def run(step_context: StepContext) -> Any:
        try:
            return budget.fit(name, body(step_context))
        except Exception as exc:
            # Whatever fails the step is checkpointed with its message: keep it within the service's limit.
            failure = bounded_failure(exc)
            if failure is exc:
                raise
            raise failure from None

    try:
        return context.step(
            run,
            name=name,
            config=StepConfig(retry_strategy=retry, serdes=JSON, step_semantics=semantics),
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
    specs = _list_tools(context, documents, deps, budget)
    plan = _plan(context, request, documents, specs, deps, budget)
    findings = context.run_in_child_context(
        lambda child: budget.require(
            "the tool calls' findings", _run_tools(child, request, documents, plan, specs, deps, budget)
        ),
        name="run tools",
        config=ChildConfig(serdes=JSON),
    )

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
                    "plan": plan["steps"],
                    "approval": approval,
                },
            )

    answer = _step(
        context,
        "answer",
        lambda step_context: _answer(step_context, request, findings, deps),
        retry=RETRY["inference"],
        budget=budget,
    )
    return budget.fit(
        "result",
        {
            "status": "completed",
            "task": request.task,
            "plan": plan["steps"],
            "answer": answer["text"],
            "findings": findings,
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


def _list_tools(
    context: DurableContext,
    documents: list[dict[str, Any]],
    deps: AgentDependencies,
    budget: StateBudget,
) -> list[ToolSpec]:
    """Every tool the model may use. A source that answers over the network (an MCP server) is listed in a
    durable step, so a replay sees the tool list the run planned with; the built-in tools are code."""
    specs: list[ToolSpec] = []
    for source in deps.tools:
        if source.name == BUILTIN:
            listed = source.list_tools(deps.tool_context)
        else:

            def list_source(_: StepContext, source: ToolSource = source) -> list[dict[str, Any]]:
                return [spec.to_dict() for spec in source.list_tools(deps.tool_context)]

            name = f"list tools {source.name}"
            stored = _step(context, name, list_source, retry=RETRY["tool"], budget=budget)
            listed = [ToolSpec.from_dict(value) for value in budget.resolve(stored)]
        specs.extend(listed)
    # Each server's names are unique (checked in its step); two servers' could still meet.
    require_unique_names(specs)
    if not documents:
        specs = [spec for spec in specs if not spec.documents]
    return specs


def _parameters(spec: ToolSpec, documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool's parameters as the model gets them: a document argument names one of the run's."""
    if spec.documents:
        return with_documents(spec.parameters, [d["uri"] for d in documents])
    return spec.parameters


def describe_step(step: dict[str, Any]) -> str:
    """A plan step as one line: ``read_excerpt(uri=notes.md)``."""
    args = ", ".join(
        f"{key}={_doc_name(value) if key == 'uri' and isinstance(value, str) else json.dumps(value)}"
        for key, value in (step.get("arguments") or {}).items()
    )
    return f"{step['tool']}({args})"


def _plan(
    context: DurableContext,
    request: AgentRequest,
    documents: list[dict[str, Any]],
    specs: list[ToolSpec],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """The model drafts the plan as JSON constrained by :func:`~snapllm.agent.schemas.plan_schema`: 1 to
    ``max_tool_calls`` steps, each naming a registered tool and arguments valid for it (a document is one
    of the run's), so every plan names real tools and documents and none can be malformed. A plan cut
    short by ``plan_max_tokens`` keeps the steps it finished (possibly none: the run then answers without
    tools)."""
    if not specs:
        return {"steps": [], "tokens": 0}
    listing = "\n".join(f"- {d['uri']} ({d['size']} bytes)" for d in documents) or "- none"
    schema = plan_schema(
        [(spec.name, _parameters(spec, documents)) for spec in specs], max_steps=deps.settings.max_tool_calls
    )
    # The tool list is in the system message, which a run's task and documents do not change: the
    # inference function's declared prefix (prompts.declared_prefixes) holds it evaluated.
    messages = [
        {"role": "system", "content": prompts.plan_system((spec.name, spec.description) for spec in specs)},
        {
            "role": "user",
            "content": f"Task: {request.task}\nDocuments:\n{listing}\n"
            f"Plan at most {deps.settings.max_tool_calls} tool calls.",
        },
    ]

    def plan(step_context: StepContext) -> dict[str, Any]:
        reply = complete(
            deps.inference,
            messages,
            max_tokens=deps.settings.plan_max_tokens,
            response_format={"type": "json_schema", "json_schema": {"name": "plan", "schema": schema}},
        )
        _log_reply(step_context, "plan", reply)
        if reply.finish_reason == "length":
            # Cut short by plan_max_tokens: the steps the model finished are valid; the plan is those.
            steps = complete_items(reply.text, "steps")[: deps.settings.max_tool_calls]
            return {"steps": steps, "tokens": reply.completion_tokens, "truncated": True}
        return {"steps": reply.json("plan")["steps"], "tokens": reply.completion_tokens}

    return budget.resolve(_step(context, "plan", plan, retry=RETRY["inference"], budget=budget))


def _run_tools(
    context: DurableContext,
    request: AgentRequest,
    documents: list[dict[str, Any]],
    plan: dict[str, Any],
    specs: list[ToolSpec],
    deps: AgentDependencies,
    budget: StateBudget,
) -> list[dict[str, Any]]:
    """Carry out the plan, one tool call per step, as a conversation with the model.

    For each step the model gets every tool's definition and answers with a tool call; ``tool_choice``
    names the step's tool (not ``"required"``): the plan is binding, so the grammar lets the model fill in
    that tool's arguments only, one call per step, and the plan's length (at most ``max_tool_calls``)
    bounds the calls. The step's arguments from the plan are in the prompt, so the call usually repeats
    them; what the model answers is what is called. Each call then runs as its own named durable step
    (:func:`_call_tool`), and its answer (or its error) goes back into the conversation, so later calls
    and the answer see it. The conversation is rebuilt from durable results on every replay.
    """
    by_name = {spec.name: spec for spec in specs}
    definitions = [spec.definition(_parameters(spec, documents)) for spec in specs]
    steps = plan["steps"]
    outline = "\n".join(f"{i}. {describe_step(step)}" for i, step in enumerate(steps, 1))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompts.CALL},
    ]
    findings: list[dict[str, Any]] = []
    for index, step in enumerate(steps, 1):
        spec = by_name[step["tool"]]
        lead = f"Task: {request.task}\nPlan:\n{outline}\n" if index == 1 else ""
        messages.append(
            {"role": "user", "content": f"{lead}Now carry out step {index}: {describe_step(step)}"}
        )
        prompt = list(messages)
        call = budget.resolve(
            _step(
                context,
                f"choose call {index}",
                lambda step_context, prompt=prompt, spec=spec, step=step: _choose_call(
                    step_context, deps, prompt, definitions, spec, step
                ),
                retry=RETRY["inference"],
                budget=budget,
            )
        )
        decision = None
        if spec.needs_approval:
            decision = _await_call_approval(context, request, index, spec, call["arguments"], deps, budget)
        if decision is not None and not decision["approved"]:
            # Not called: the model is told so, as the call's answer.
            outcome = {
                "is_error": True,
                "preview": f"not called: {decision['reason']}"[:PROMPT_SNIPPET_CHARS],
            }
        else:
            outcome = _call_tool(context, index, spec, call["arguments"], deps, budget)
        # Call ids are the step numbers, so the conversation (and every prompt's seed) is reproducible.
        call_id = f"call_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": spec.name, "arguments": json.dumps(call["arguments"])},
                    }
                ],
            }
        )
        answer = outcome["preview"] or "(no text)"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": answer})
        finding = {
            "step": index,
            "tool": spec.name,
            "arguments": call["arguments"],
            "is_error": outcome["is_error"],
            "preview": outcome["preview"],
        }
        if decision is not None:
            finding["approval"] = decision
        findings.append(finding)
    return findings


def _await_call_approval(
    context: DurableContext,
    request: AgentRequest,
    index: int,
    spec: ToolSpec,
    arguments: dict[str, Any],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """Wait for a person to approve step ``index``'s call of a tool that needs approval. The review shows
    the exact arguments the call will send; the call is made only with an approval."""
    name = tool_approval_callback(index)
    review = {
        "kind": "tool_call",
        "task": request.task,
        "step": index,
        "tool": spec.name,
        "server": spec.source,
        "server_tool": spec.tool,
        "description": spec.description,
        "arguments": arguments,
    }
    return _ask_approval(context, name, review, request.approval.timeout_s, deps, budget)


def _choose_call(
    step_context: StepContext,
    deps: AgentDependencies,
    prompt: list[dict[str, Any]],
    definitions: list[dict[str, Any]],
    spec: ToolSpec,
    planned: dict[str, Any],
) -> dict[str, Any]:
    """The model's call for one plan step. A call cut short by ``tool_call_max_tokens`` (a small model
    may fill a free string to its bound) is not a failure: the plan already holds arguments valid against
    the same schema, and those are called instead (``"from_plan": true``)."""
    reply = complete(
        deps.inference,
        prompt,
        max_tokens=deps.settings.tool_call_max_tokens,
        tools=definitions,
        tool_choice={"type": "function", "function": {"name": spec.name}},
        parallel_tool_calls=False,
    )
    _log_reply(step_context, f"call {spec.name}", reply)
    if reply.tool_calls:
        return {"tool": spec.name, "arguments": reply.tool_calls[0]["arguments"]}
    if reply.finish_reason == "length":
        return {"tool": spec.name, "arguments": planned.get("arguments") or {}, "from_plan": True}
    raise ModelAnswerIncompleteError(f"the model answered without calling {spec.name}")


def _call_tool(
    context: DurableContext,
    index: int,
    spec: ToolSpec,
    arguments: dict[str, Any],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """One tool call as a named durable step. The whole answer is checkpointed, or offloaded to S3 when it
    is over the budget; a short text preview stays in the checkpoint for the conversation and the answer.

    Durable steps run *at least once*: a step whose body ran but whose result was not checkpointed yet
    (the function timed out, crashed or was replaced in between) runs again on the next invocation, and a
    retried step runs again by design. For a tool that reads, or that is idempotent, that costs a second
    call and nothing else. For any other tool it could do a thing twice (open two tickets, pay twice), so:

    - every call carries an idempotency key derived from the execution and the step's name (the same on
      every attempt and replay), in ``_meta``, which a server may use to drop a repeated call;
    - a tool that is not idempotent (neither named in its server's ``idempotent`` list nor annotated
      ``idempotentHint``/``readOnlyHint``) runs with ``AT_MOST_ONCE_PER_RETRY``: the step is checkpointed
      as started before the call leaves, and an attempt that was interrupted is not run again silently
      but counted as failed; its retry rule (``tool_once``) then retries only failures where nothing was
      sent (server unreachable). A call that broke off after it was sent fails the step: whether it took
      effect is for a person to find out, not for a retry to guess.
    """
    name = f"call {index} {spec.name}"
    source = deps.source(spec.source)

    def run(step_context: StepContext) -> dict[str, Any]:
        key = idempotency_key(context.execution_context.durable_execution_arn, name)
        result = source.call(spec.tool, arguments, deps.tool_context, idempotency_key=key)
        return {
            "is_error": result.is_error,
            # Whole sentences: a small model copies a note into its answer, cut word and all.
            "preview": whole_sentences(result.text[:PROMPT_SNIPPET_CHARS]),
            "text_bytes": len(result.text.encode()),
            "result": budget.fit(name, result.to_dict()),
        }

    semantics = (
        StepSemantics.AT_LEAST_ONCE_PER_RETRY if spec.idempotent else StepSemantics.AT_MOST_ONCE_PER_RETRY
    )
    return _step(context, name, run, retry=RETRY[spec.retry_class], budget=budget, semantics=semantics)


def idempotency_key(execution_arn: str, step_name: str) -> str:
    """The key a tool call carries: the same for every attempt and replay of one step of one execution,
    different for any other step or execution."""
    return hashlib.sha256(f"{execution_arn}\0{step_name}".encode()).hexdigest()[:32]


def _await_approval(
    context: DurableContext,
    request: AgentRequest,
    plan: dict[str, Any],
    findings: list[dict[str, Any]],
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """Wait (at no cost: the function is not running) for a person to approve or reject the run."""
    review = {"kind": "run", "task": request.task, "plan": plan["steps"], "findings": findings}
    return _ask_approval(context, APPROVAL_CALLBACK, review, request.approval.timeout_s, deps, budget)


def _ask_approval(
    context: DurableContext,
    name: str,
    review: dict[str, Any],
    timeout_s: int,
    deps: AgentDependencies,
    budget: StateBudget,
) -> dict[str, Any]:
    """One approval: a callback named ``name``, and a step that writes the review document the approver
    reads (its callback id included); the run's state keeps only the document's reference."""
    callback = context.create_callback(
        name=name,
        config=CallbackConfig(timeout=Duration.from_seconds(timeout_s), serdes=JSON),
    )

    def request_approval(_: StepContext) -> dict[str, Any]:
        document = {"callback_id": callback.callback_id, **review, "timeout_s": timeout_s}
        key = f"runs/{budget.run_id}/{review_document(name)}"
        return {"review": deps.store.put_json(key, document)}

    step_name = "request approval" if name == APPROVAL_CALLBACK else f"request approval {name}"
    _step(context, step_name, request_approval, retry=RETRY["storage"], budget=budget)
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
    step_context: StepContext, request: AgentRequest, findings: list[dict[str, Any]], deps: AgentDependencies
) -> dict[str, Any]:
    """The answer, from what the tool calls found. The task comes last, as the question: a small model
    otherwise continues the notes' pattern instead of answering."""
    lines = []
    for f in findings:
        said = "failed: " if f["is_error"] else ""
        lines.append(f"- {describe_step(f)}: {said}{f['preview'][:PROMPT_SNIPPET_CHARS].strip()}")
    notes = "\n".join(lines) or "- no tool calls"
    reply = chat(
        deps.inference,
        system=prompts.ANSWER,
        user=f"Notes from the tools:\n{notes}\n\n{request.task}",
        max_tokens=deps.settings.answer_max_tokens,
    )
    _log_reply(step_context, "answer", reply)
    return {"text": reply.prose, "tokens": reply.completion_tokens}


def _log_reply(step_context: StepContext, what: str, reply: ChatReply) -> None:
    """One line per model call: its prompt, how much of it a saved state held, what it generated. The
    step's logger says nothing while a replay re-runs finished steps."""
    step_context.logger.info(
        "%s: %d prompt tokens (%d cached), %d generated",
        what,
        reply.prompt_tokens,
        reply.cached_tokens,
        reply.completion_tokens,
        extra={
            "model_call": what,
            "prompt_tokens": reply.prompt_tokens,
            "cached_tokens": reply.cached_tokens,
            "completion_tokens": reply.completion_tokens,
        },
    )


def _human_seconds(seconds: int) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"
