"""The agent's tools from a real MCP server: the ``mcp`` SDK's server over streamable HTTP on 127.0.0.1
(see :mod:`tests.support.mcp_server`), the real model (SmolLM2 restored from its local snapshot) choosing the
calls, the local S3 endpoint, and the SDK's testing runner playing the durable service.

Each test offers the model one or two of the server's tools (``tools`` in the server's configuration) and
names no document, so the built-in tools are not offered: whatever the small model plans, it calls the tool
under test. Calls are counted on the server's side. Faults are real HTTP faults: the project's fault proxy
(:mod:`snapllm_dev.local.faults`) sits between the agent and the server and answers one ``tools/call`` with a
5xx, or resets the connection after the server has answered it. The answer only has to show that the run
went on to it, so it is a few tokens long (:data:`~tests.support.agent.SHORT_ANSWER_TOKENS`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from snapllm.agent.budget import OFFLOADED
from snapllm.agent.errors import MAX_ERROR_TEXT_BYTES
from snapllm.agent.flow import PROMPT_SNIPPET_CHARS
from snapllm.agent.mcp import model_tool_name
from snapllm.agent.settings import McpServerConfig
from snapllm_dev.local.durable import LocalAgent, LocalRun, approve
from snapllm_dev.local.faults import Fault, FaultProxy, ProxiedRequest, StreamFault
from tests.support.agent import AGENT_GROUP, SHORT_ANSWER_TOKENS, CountingHandler
from tests.support.mcp_server import (
    INVALID_PATHS,
    LONG_ERROR_BYTES,
    PNG,
    PUNCTUATED_TOOLS,
    REPORT_BYTES,
    ToolServer,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(AGENT_GROUP)]

# The MCP calls' timeout where a fault may hold one: a stalled call costs this. A healthy session with the
# test server (connect, initialize, the call) takes under 0.2 s on a busy 2-core machine.
FAULT_TIMEOUT_S = 3


@pytest.fixture
def server() -> Iterator[ToolServer]:
    with ToolServer.start() as server:
        yield server


def _run(
    agent: LocalAgent,
    url: str,
    name: str,
    *tools: str,
    task: str = "Find out what SnapStart does, with the tools.",
    approval: bool = False,
    decide: Any = None,
    steps: int = 1,
    wrap_handler: Any = None,
    more_servers: tuple[McpServerConfig, ...] = (),
    timeout_s: float = 10,
    **server: Any,
) -> LocalRun:
    config = McpServerConfig(name="ops", url=url, tools=tools, timeout_s=timeout_s, **server)
    settings = agent.with_settings(
        mcp_servers=(config, *more_servers), max_tool_calls=steps, answer_max_tokens=SHORT_ANSWER_TOKENS
    )
    event = {"task": task, "approval": {"required": approval, "timeout": "1h"}}
    run = agent.run(
        event, settings=settings, decide=decide or approve(), wrap_handler=wrap_handler, execution_name=name
    )
    print(run.report.render())
    assert run.report.over_budget == [], run.report.render()
    return run


def _calls(run: LocalRun, tool: str) -> list[Any]:
    return [
        r
        for r in run.report.rows
        if r.type == "STEP" and r.name.startswith("call ") and r.name.endswith(tool)
    ]


def _step_result(run: LocalRun, name: str) -> dict[str, Any]:
    op = next(
        op
        for op in run.test_result.get_all_operations()
        if op.name == name and op.operation_type.value == "STEP"
    )
    return json.loads(op.result)


def test_tools_on_a_real_mcp_server_are_called_as_durable_steps(agent, server):
    run = _run(agent, server.url, "mcp-lookup", "lookup", steps=2)

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed" and run.output["answer"].strip()
    # The tool list came from the server, in a step of its own; the plan names the server's tool.
    listing = run.report.find("list tools ops")
    assert listing.type == "STEP" and listing.status == "SUCCEEDED" and listing.bytes > 0
    assert run.output["plan"] and {step["tool"] for step in run.output["plan"]} == {"ops__lookup"}
    calls = _calls(run, "ops__lookup")
    # Each call is a named step with its checkpointed bytes, made once: the server counted as many.
    assert calls and all(row.status == "SUCCEEDED" and row.attempts == 1 and row.bytes > 0 for row in calls)
    assert server.calls["lookup"] == len(calls) == len(run.output["plan"])
    # What the model sent is what the server got, and each step's call carried its own idempotency key.
    assert [f["arguments"] for f in run.output["findings"]] == server.arguments["lookup"]
    assert len(set(server.keys["lookup"])) == len(calls) and all(len(k) == 32 for k in server.keys["lookup"])
    assert all(not f["is_error"] and f["preview"] for f in run.output["findings"])


def test_a_tool_error_goes_back_to_the_model_and_the_run_finishes(agent, server):
    run = _run(agent, server.url, "mcp-broken", "broken")

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed" and run.output["answer"].strip()
    (finding,) = run.output["findings"]
    assert finding["is_error"] and "failed on purpose" in finding["preview"]
    (call,) = _calls(run, "ops__broken")
    assert call.status == "SUCCEEDED" and call.attempts == 1  # an error answer is an answer: no retry
    assert server.calls["broken"] == 1


@pytest.mark.parametrize(
    "fault",
    [
        Fault(status=503),
        Fault(stream=StreamFault.RESET, after=0),
        Fault(stream=StreamFault.CLOSE, after=0),
        # Held until the call's timeout (FAULT_TIMEOUT_S) ends the attempt.
        Fault(stream=StreamFault.STALL, after=0),
    ],
    ids=[
        "503-before-the-server",
        "reset-after-the-server-answered",
        "close-after-the-server-answered",
        "stall-after-the-server-answered",
    ],
)
def test_a_transport_failure_of_an_idempotent_tool_is_retried_with_the_same_key(agent, server, fault):
    fired: list[str] = []

    def once(request: ProxiedRequest) -> Fault | None:
        if request.headers.get("mcp-method") == "tools/call" and not fired:
            fired.append(request.path)
            return fault
        return None

    with FaultProxy(server.url.removesuffix("/mcp"), rule=once) as proxy:
        name = f"mcp-fault-{fault.status or fault.stream.value}"
        run = _run(agent, f"{proxy.url}/mcp", name, "lookup", timeout_s=FAULT_TIMEOUT_S)

    assert fired and run.status == "SUCCEEDED", run.error
    (call,) = _calls(run, "ops__lookup")
    assert call.status == "SUCCEEDED" and call.attempts == 2
    # A 503 from the proxy never reached the server; a reset, close or stall came after the server had
    # answered, so it saw the call twice, with the one key a server can drop the repeat by.
    assert server.calls["lookup"] == (1 if fault.status else 2)
    assert len(set(server.keys["lookup"])) == 1


def test_a_server_that_is_down_fails_the_step_with_a_clear_message_after_its_retries(agent):
    run = _run(agent, "http://127.0.0.1:9/mcp", "mcp-down", "lookup")

    assert run.status == "FAILED"
    assert run.error["ErrorType"] == "snapllm.agent.errors.ToolServerUnreachableError"
    assert run.error["ErrorMessage"].startswith(
        "MCP server 'ops' (http://127.0.0.1:9/mcp) could not be reached while tools/list: ConnectError"
    )
    listing = run.report.find("list tools ops")
    assert listing.status == "FAILED" and listing.attempts == 4  # the tool retry rule's attempts


def test_a_large_result_goes_to_s3_and_only_its_reference_is_checkpointed(agent, server):
    run = _run(agent, server.url, "mcp-report", "report")

    assert run.status == "SUCCEEDED", run.error
    (call,) = _calls(run, "ops__report")
    assert call.bytes < 1024  # 200 KB of text answered, a reference and a preview checkpointed
    checkpointed = _step_result(run, call.name)
    assert checkpointed["text_bytes"] == REPORT_BYTES and len(checkpointed["preview"]) <= PROMPT_SNIPPET_CHARS
    ref = checkpointed["result"][OFFLOADED]
    stored = agent.deployment.s3.client().get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
    assert len(json.loads(stored)["text"]) == REPORT_BYTES and ref["size"] == len(stored)


def test_binary_content_is_stored_in_s3_never_inlined(agent, server):
    run = _run(agent, server.url, "mcp-chart", "chart", task="Draw the cost chart with the tools.")

    assert run.status == "SUCCEEDED", run.error
    (call,) = _calls(run, "ops__chart")
    checkpointed = _step_result(run, call.name)
    (part,) = checkpointed["result"]["binary"]
    assert part["type"] == "image" and part["mime_type"] == "image/png"
    assert base64.b64encode(PNG).decode() not in json.dumps(checkpointed)
    ref = part["artifact"]
    stored = agent.deployment.s3.client().get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
    assert stored == PNG


def _gate(answer: bool) -> tuple[list[dict[str, Any]], Any]:
    reviews: list[dict[str, Any]] = []

    def decide(review: dict[str, Any]) -> dict[str, Any]:
        reviews.append(review)
        return {"approved": answer, "approver": "carol", "reason": "checked" if answer else "not today"}

    return reviews, decide


def test_an_approval_gated_tool_is_not_called_when_rejected(agent, server):
    reviews, decide = _gate(False)
    run = _run(
        agent,
        server.url,
        "mcp-deploy-rejected",
        "deploy",
        task="Deploy version 2 of the api service.",
        needs_approval=("deploy",),
        decide=decide,
    )

    assert run.status == "SUCCEEDED", run.error
    assert server.calls["deploy"] == 0
    (review,) = reviews
    assert review["kind"] == "tool_call" and review["server"] == "ops" and review["server_tool"] == "deploy"
    (finding,) = run.output["findings"]
    assert review["arguments"] == finding["arguments"]  # the exact arguments the call would have sent
    assert finding["is_error"] and finding["preview"] == "not called: rejected by carol: not today"
    assert run.report.find("approve call 1").type == "CALLBACK"
    assert _calls(run, "ops__deploy") == []
    assert run.output["status"] == "completed" and run.output["answer"].strip()


def test_an_approval_gated_tool_waits_and_sends_the_approved_arguments(agent, server):
    reviews, decide = _gate(True)
    run = _run(
        agent,
        server.url,
        "mcp-deploy-approved",
        "deploy",
        task="Deploy version 2 of the api service.",
        needs_approval=("deploy",),
        decide=decide,
    )

    assert run.status == "SUCCEEDED", run.error
    (review,) = reviews
    assert server.calls["deploy"] == 1 and server.arguments["deploy"] == [review["arguments"]]
    (call,) = _calls(run, "ops__deploy")
    assert call.attempts == 1 and run.output["findings"][0]["approval"]["approved"] is True


def test_replaying_the_execution_calls_no_tool_twice(agent, server):
    handler = CountingHandler()
    _, decide = _gate(True)
    run = _run(
        agent,
        server.url,
        "mcp-replay",
        "lookup",
        "deploy",
        task="Look up SnapStart, then deploy the api.",
        steps=2,
        approval=True,
        needs_approval=("deploy",),
        decide=decide,
        wrap_handler=handler,
    )

    assert run.status == "SUCCEEDED", run.error
    # Each approval wait ends an invocation; the next one replays every operation before it.
    assert handler.invocations >= 2
    for tool in ("lookup", "deploy"):
        assert server.calls[tool] == len(_calls(run, f"ops__{tool}"))
    assert sum(server.calls.values()) == len(run.output["findings"]) - sum(
        1 for f in run.output["findings"] if "approval" in f and not f["approval"]["approved"]
    )


def test_a_json_rpc_error_from_a_tool_goes_back_to_the_model_and_the_run_finishes(agent, server):
    run = _run(agent, server.url, "mcp-jsonrpc-error", "validate", task="Check the ticket ABC-12.")

    assert run.status == "SUCCEEDED", run.error
    assert run.output["status"] == "completed" and run.output["answer"].strip()
    (finding,) = run.output["findings"]
    assert finding["is_error"] and finding["preview"].startswith(
        "error -32602: ticket must look like ABC-123"
    )
    (call,) = _calls(run, "ops__validate")
    assert call.status == "SUCCEEDED" and call.attempts == 1  # an answer, not a transport failure
    assert server.calls["validate"] == 1


def test_a_json_rpc_error_of_any_size_is_cut_to_its_stated_size_and_checkpointed(agent, server):
    run = _run(agent, server.url, "mcp-jsonrpc-long-error", "audit", task="Audit the api deployment.")

    assert run.status == "SUCCEEDED", run.error
    (call,) = _calls(run, "ops__audit")
    assert call.status == "SUCCEEDED" and call.attempts == 1
    text = _step_result(run, call.name)["result"]["text"]
    assert text.startswith("error -32602: audit refused") and "more characters)" in text
    assert len(json.dumps(text)) <= MAX_ERROR_TEXT_BYTES < LONG_ERROR_BYTES
    assert run.output["findings"][0]["is_error"]


def test_a_failure_whose_message_is_over_32_kb_is_checkpointed_and_names_its_cause(agent, server):
    # The server answers tools/list with a 40 KB JSON-RPC error: the step's failure carries the server's text,
    # cut, so the service can record it, and the run reports that cause (not an interrupted step).
    run = _run(agent, server.url.replace("/mcp", "/refusing"), "mcp-long-failure", "lookup")

    assert run.status == "FAILED"
    assert run.error["ErrorType"] == "snapllm.agent.errors.ToolServerRejectedError"
    message = run.error["ErrorMessage"]
    assert message.startswith("MCP server 'ops' (") and "answered tools/list with error -32602" in message
    assert "request refused" in message and "more characters)" in message
    assert len(json.dumps(run.error)) < 32768
    assert run.report.find("list tools ops").attempts == 1


def test_tools_whose_names_differ_only_in_punctuation_each_reach_the_model(agent, server):
    run = _run(
        agent,
        server.url,
        "mcp-punctuation",
        *PUNCTUATED_TOOLS,
        task="Find out what SnapStart does, with the fact tools.",
    )

    assert run.status == "SUCCEEDED", run.error
    names = [model_tool_name("ops", tool) for tool in PUNCTUATED_TOOLS]
    assert len(set(names)) == 3 and "ops__fact_get" in names
    (listing,) = [r for r in run.report.rows if r.name == "list tools ops"]
    listed = _step_result(run, listing.name)
    assert sorted(spec["name"] for spec in listed) == sorted(names)
    assert {spec["name"]: spec["tool"] for spec in listed} == dict(zip(names, PUNCTUATED_TOOLS, strict=True))
    # The call the model chose reached the tool its name stands for, and only that one.
    (finding,) = run.output["findings"]
    called = dict(zip(names, PUNCTUATED_TOOLS, strict=True))[finding["tool"]]
    assert server.calls == {called: 1} and finding["preview"].startswith(f"{called}: ")


def test_a_server_name_with_a_double_underscore_keeps_its_tools_apart(agent):
    # Server "ops__fact" tool "get" and server "ops" tool "fact__get" would both be "ops__fact__get".
    with ToolServer.start(extra_tools=("get", "fact__get")) as both:
        other = McpServerConfig(name="ops__fact", url=both.url, tools=("get",), timeout_s=10)
        run = _run(
            agent,
            both.url,
            "mcp-double-underscore",
            "fact__get",
            task="Look up the fact about snapstart.",
            more_servers=(other,),
        )
        calls = dict(both.calls)

    assert run.status == "SUCCEEDED", run.error
    assert model_tool_name("ops", "fact__get") == "ops__fact__get"
    assert model_tool_name("ops__fact", "get").startswith("ops__fact__get_")
    assert sum(calls.values()) == len(run.output["findings"]) == 1


def test_a_name_collision_left_is_reported_at_list_tools_naming_both_tools(agent):
    taken = model_tool_name("ops", "fact.get").removeprefix("ops__")  # a tool literally named like it
    with ToolServer.start(extra_tools=(taken,)) as server:
        run = _run(agent, server.url, "mcp-collision", "fact.get", taken)

    assert run.status == "FAILED"
    assert run.error["ErrorType"] == "snapllm.agent.errors.ToolNameCollisionError"
    assert run.error["ErrorMessage"] == (
        f"tool 'fact.get' of 'ops' and tool '{taken}' of 'ops' both reach the model as 'ops__{taken}'; "
        "leave one out (the server's 'tools' list) or rename it"
    )
    listing = run.report.find("list tools ops")
    assert listing.status == "FAILED" and listing.attempts == 1
    assert server.calls == {}


@pytest.mark.parametrize("path", INVALID_PATHS)
def test_a_server_answering_invalid_json_rpc_fails_at_once_with_its_own_error(agent, server, path):
    url = server.url.replace("/mcp", path)
    run = _run(agent, url, f"mcp-invalid-{path.rsplit('/', 1)[-1]}", "lookup")

    assert run.status == "FAILED"
    assert run.error["ErrorType"] == "snapllm.agent.errors.ToolServerProtocolError"
    message = run.error["ErrorMessage"]
    assert message.startswith(f"MCP server 'ops' ({url}) answered with invalid JSON-RPC while tools/list: ")
    assert "could not be reached" not in message
    listing = run.report.find("list tools ops")
    assert listing.status == "FAILED" and listing.attempts == 1  # not retried as a connection failure
