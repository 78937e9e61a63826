"""Agent building blocks without the model: input parsing, chunk planning, retries, the state budget."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from pydantic import ValidationError

from snapllm.agent import prompts
from snapllm.agent.artifacts import ArtifactStore, S3Location
from snapllm.agent.budget import OFFLOADED, StateBudget, checkpoint_size, is_offloaded
from snapllm.agent.errors import (
    MAX_ERROR_TEXT_BYTES,
    AgentError,
    AgentInputError,
    ArtifactStoreError,
    DocumentAccessDeniedError,
    DocumentNotFoundError,
    InferenceDeadlineError,
    InferenceRejectedError,
    StateBudgetExceededError,
    ToolServerRejectedError,
    ToolServerUnreachableError,
    ToolTransportError,
    bounded_failure,
    bounded_text,
)
from snapllm.agent.flow import _decision, describe_step, idempotency_key
from snapllm.agent.llm import complete, complete_items
from snapllm.agent.mcp import model_tool_name
from snapllm.agent.operations import (
    APPROVAL_CALLBACK,
    is_approval_callback,
    review_document,
    tool_approval_callback,
)
from snapllm.agent.request import AgentRequest
from snapllm.agent.retry import INFERENCE_RETRY, NEVER_RETRY, STORAGE_RETRY, TOOL_ONCE_RETRY, TOOL_RETRY
from snapllm.agent.schemas import enforceable, plan_schema, with_documents
from snapllm.agent.settings import AgentSettings
from snapllm.agent.tools import BuiltinTools, DocumentChunk, ToolContext, chunk_offset
from snapllm.errors import (
    ConfigurationError,
    DeadlineExceededError,
    InferenceFailedError,
    InferenceThrottledError,
    InferenceTimeoutError,
)
from snapllm.protocol.constraints.structured import check_schema
from snapllm.protocol.prefixes import read_prefixes
from snapllm_dev.local.durable import with_mcp_servers
from snapllm_dev.local.s3 import LocalS3
from tests.support.paths import REPO

BUCKET = "snapllm-agent-unit"


def test_request_accepts_durations_and_defaults():
    request = AgentRequest.parse(
        {"task": "t", "documents": ["s3://b/agent/a.md"], "approval": {"required": True, "timeout": "3d"}},
        max_documents=4,
    )
    assert request.approval.required and request.approval.timeout_s == 3 * 86400
    assert AgentRequest.parse({"task": "t"}, max_documents=4).approval.required is False
    assert (
        AgentRequest.parse({"task": "t", "approval": {"timeout": 90}}, max_documents=1).approval.timeout_s
        == 90
    )


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({}, "task"),
        ({"task": ""}, "task"),
        ({"task": "t", "extra": 1}, "extra"),
        ({"task": "t", "approval": {"timeout": "soon"}}, "timeout"),
        ({"task": "t", "documents": ["s3://b/a", "s3://b/b", "s3://b/c"]}, "at most 2 documents"),
        ({"task": "t", "documents": ["s3://b/a", "s3://b/a"]}, "must not repeat"),
        (["not", "an", "object"], "JSON object"),
    ],
)
def test_request_rejects_bad_input_with_a_clear_message(event, message):
    with pytest.raises(AgentInputError, match=message):
        AgentRequest.parse(event, max_documents=2)


def test_chunks_are_bounded_and_spread_over_a_large_document():
    settings = AgentSettings(artifacts_bucket=BUCKET, chunks_per_document=3, chunk_bytes=1000)
    assert [chunk_offset(10_000_000, part, settings) for part in range(3)] == [
        (0, 1000),
        (4_999_500, 1000),
        (9_999_000, 1000),
    ]
    # A document of one chunk has one part: any part number reads it whole.
    assert chunk_offset(300, 0, settings) == chunk_offset(300, 2, settings) == (0, 300)
    assert chunk_offset(10_000_000, 7, settings) == (9_999_000, 1000)


def test_tool_parameters_come_from_the_input_models_and_the_grammar_keeps_them():
    settings = AgentSettings(artifacts_bucket=BUCKET, chunks_per_document=3)
    ctx = ToolContext(store=None, inference=None, settings=settings)  # type: ignore[arg-type]
    specs = {spec.name: spec for spec in BuiltinTools().list_tools(ctx)}
    assert set(specs) == {"read_excerpt", "summarize_chunk"} and all(s.documents for s in specs.values())
    part = specs["summarize_chunk"].parameters["properties"]["part"]
    # The range becomes the enum of the setting (the grammar holds pydantic's ge/lt bounds too).
    assert part["enum"] == [0, 1, 2]
    assert DocumentChunk.model_json_schema()["properties"]["part"]["exclusiveMaximum"] == 8
    docs = ["s3://b/agent/documents/a.md", "s3://b/agent/documents/b.md"]
    for spec in specs.values():
        check_schema(with_documents(spec.parameters, docs), param="tools")
    assert with_documents(specs["read_excerpt"].parameters, docs)["properties"]["uri"]["enum"] == docs
    schema = plan_schema([(s.name, with_documents(s.parameters, docs)) for s in specs.values()], max_steps=4)
    check_schema(schema, param="response_format")
    assert schema["properties"]["steps"]["maxItems"] == 4
    consts = [
        option["properties"]["tool"]["const"] for option in schema["properties"]["steps"]["items"]["anyOf"]
    ]
    assert consts == ["read_excerpt", "summarize_chunk"]


def test_enforceable_rewrites_what_the_grammar_cannot_keep():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "big": {"type": "integer", "minimum": 0, "maximum": 10_000},
            "url": {"type": "string", "format": "uri"},
            "when": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 3, "format": "date"},
        },
        "$defs": {"x": {"type": "number", "multipleOf": 2}},
    }
    out = enforceable(schema)
    check_schema(out, param="tools")
    assert out["properties"]["n"]["enum"] == [1, 2, 3]
    # Bounds and the formats with a grammar are enforced, so they are kept.
    assert out["properties"]["big"] == {"type": "integer", "minimum": 0, "maximum": 10_000}
    assert out["properties"]["url"] == {"type": "string", "format": "uri"}
    assert out["properties"]["when"]["format"] == "date"
    assert "uniqueItems" not in out["properties"]["tags"] and out["$defs"]["x"] == {
        "type": "number",
        "multipleOf": 2,
    }
    assert out["properties"]["code"] == {"type": "string", "pattern": "^[A-Z]{3}$"}  # one of them is kept
    assert schema["properties"]["n"]["minimum"] == 1  # a copy: the source schema is unchanged


def test_the_arguments_object_takes_only_the_properties_the_tool_declares():
    # A small model otherwise invents arguments until max_tokens cuts the plan; an object an allOf combines
    # stays open (closing it would refuse the other branches' properties), and a tool's own choice stands.
    flat = enforceable({"type": "object", "properties": {"service": {"type": "string"}}})
    assert flat["additionalProperties"] is False
    combined = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "allOf": [{"properties": {"b": {"type": "string"}}}],
    }
    assert "additionalProperties" not in enforceable(combined)
    open_by_choice = {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}
    assert enforceable(open_by_choice)["additionalProperties"] == {"type": "string"}


def test_enforceable_reaches_every_schema_position_the_grammar_does_and_leaves_data_alone():
    # The positions are the protocol's (map_subschemas), so what check_schema walks is what gets rewritten.
    odd = {"type": "number", "not": {"multipleOf": 2}}  # validated on an answer, never generated
    schema = {
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [odd, {"type": "string", "format": "iri"}]},
            "first": {"type": "array", "prefixItems": [odd]},
            "either": {"anyOf": [odd, {"type": "null"}]},
            "extra": {"type": "object", "additionalProperties": odd},
            "fixed": {"const": {"multipleOf": 2, "format": "uri"}},
        },
        "definitions": {"old": odd},
    }
    out = enforceable(schema)
    check_schema(out, param="tools")
    assert out["properties"]["pair"]["items"] == [{"type": "number"}, {"type": "string"}]
    assert out["properties"]["first"]["prefixItems"] == [{"type": "number"}]
    assert out["properties"]["either"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert out["properties"]["extra"]["additionalProperties"] == {"type": "number"}
    assert out["definitions"]["old"] == {"type": "number"}
    # A const is a value, not a schema: nothing in it is rewritten.
    assert out["properties"]["fixed"] == {"const": {"multipleOf": 2, "format": "uri"}}


def test_plan_steps_read_as_one_line_and_idempotency_keys_are_per_step():
    step = {"tool": "summarize_chunk", "arguments": {"uri": "s3://b/agent/documents/a.md", "part": 1}}
    assert describe_step(step) == "summarize_chunk(uri=a.md, part=1)"
    arn = "arn:aws:lambda:us-east-1:1:function:f:live/durable-execution/run/abc"
    key = idempotency_key(arn, "call 1 deploy")
    assert key == idempotency_key(arn, "call 1 deploy") and len(key) == 32
    assert key != idempotency_key(arn, "call 2 deploy") and key != idempotency_key(arn + "x", "call 1 deploy")


def test_approval_answers_are_normalised():
    assert _decision({"approved": True, "approver": "ann", "reason": "ok"}) == {
        "approved": True,
        "approver": "ann",
        "reason": "ok",
    }
    assert _decision({"approved": False})["reason"] == "rejected by the approver: no reason given"
    assert _decision("yes")["approved"] is False  # anything malformed is a rejection


def test_retry_strategies_retry_only_transient_errors():
    assert INFERENCE_RETRY(InferenceThrottledError("busy"), 1).should_retry
    assert INFERENCE_RETRY(InferenceTimeoutError("slow"), 4).should_retry
    assert not INFERENCE_RETRY(InferenceThrottledError("busy"), 5).should_retry  # attempts are bounded
    assert not INFERENCE_RETRY(InferenceRejectedError("400"), 1).should_retry
    assert STORAGE_RETRY(ArtifactStoreError("503"), 1).should_retry
    assert not STORAGE_RETRY(DocumentNotFoundError("gone"), 1).should_retry
    assert not NEVER_RETRY(ArtifactStoreError("503"), 1).should_retry


def test_settings_keep_the_budget_below_the_service_limit():
    assert AgentSettings.from_env({"SNAPLLM_AGENT_ARTIFACTS_BUCKET": BUCKET}).state_budget_bytes == 65536
    with pytest.raises(ValidationError, match="less than 262144"):
        AgentSettings(artifacts_bucket=BUCKET, state_budget_bytes=256 * 1024)
    with pytest.raises(ConfigurationError, match="ARTIFACTS_BUCKET"):
        AgentSettings.from_env({})
    assert AgentSettings(artifacts_bucket=BUCKET, artifacts_prefix="x").artifacts_prefix == "x/"


@pytest.fixture(scope="module")
def store(local_s3: LocalS3) -> ArtifactStore:
    local_s3.ensure_bucket(BUCKET)
    return ArtifactStore(local_s3.client(), bucket=BUCKET, prefix="agent/")


def test_store_refuses_documents_outside_its_prefix(store: ArtifactStore):
    assert store.document(f"s3://{BUCKET}/agent/documents/a.md") == S3Location(BUCKET, "agent/documents/a.md")
    with pytest.raises(DocumentAccessDeniedError, match="outside"):
        store.document(f"s3://{BUCKET}/models/model.gguf")
    with pytest.raises(DocumentAccessDeniedError):
        store.document("s3://another-bucket/agent/a.md")
    with pytest.raises(AgentInputError):
        store.document("https://example.com/a.md")
    with pytest.raises(DocumentNotFoundError, match="does not exist"):
        store.head(store.document(f"s3://{BUCKET}/agent/documents/missing.md"))


def test_budget_keeps_small_values_and_offloads_large_ones(store: ArtifactStore):
    budget = StateBudget(store, limit_bytes=1024, run_id="unit")
    small = {"summary": "short"}
    assert budget.fit("small", small) is small

    large = {"text": "x" * 5000}
    kept = budget.fit("excerpt big.txt@0", large)
    assert is_offloaded(kept) and checkpoint_size(kept) < 300
    ref = kept[OFFLOADED]
    assert ref["key"].startswith("agent/runs/unit/excerpt-big.txt-0-")
    stored = store._s3.get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
    assert ref["size"] == len(stored) and ref["sha256"] == hashlib.sha256(stored).hexdigest()
    assert budget.resolve(kept) == large
    assert budget.fit("excerpt big.txt@0", large) == kept  # content-addressed: a retry writes the same key


def test_budget_shares_fit_together_and_required_values_are_checked(store: ArtifactStore):
    budget = StateBudget(store, limit_bytes=4096, run_id="unit")
    share = budget.share(8)
    items = [share.fit(f"item {i}", {"text": "y" * 2000}) for i in range(8)]
    batch = {
        "all": [{"index": i, "status": "SUCCEEDED", "result": r, "error": None} for i, r in enumerate(items)]
    }
    batch["completionReason"] = "ALL_COMPLETED"
    assert checkpoint_size(batch) <= 4096
    with pytest.raises(StateBudgetExceededError, match="over the state budget"):
        budget.require("the run's input", {"task": "z" * 5000})


def test_a_changed_artifact_is_detected(store: ArtifactStore):
    ref = store.put_json("runs/unit/changing.json", {"a": 1})
    store._s3.put_object(Bucket=ref["bucket"], Key=ref["key"], Body=json.dumps({"a": 2}).encode())
    with pytest.raises(ArtifactStoreError, match="changed"):
        store.get_json(ref)


def test_mcp_servers_are_configured_as_a_json_list_with_their_auth():
    env = {
        "SNAPLLM_AGENT_ARTIFACTS_BUCKET": BUCKET,
        "SNAPLLM_AGENT_MCP_SERVERS": json.dumps(
            [
                {"name": "docs", "url": "http://127.0.0.1:8931/mcp", "idempotent": ["search"]},
                {"name": "gw", "url": "https://gw.example.com/mcp", "auth": "iam", "region": "us-east-1"},
                {
                    "name": "ops",
                    "url": "https://ops.example.com/mcp",
                    "auth": "bearer",
                    "secret_arn": "arn:aws:secretsmanager:us-east-1:1:secret:ops-AbCdEf",
                    "needs_approval": ["deploy"],
                },
            ]
        ),
    }
    servers = AgentSettings.from_env(env).mcp_servers
    assert [(s.name, s.auth) for s in servers] == [("docs", "none"), ("gw", "iam"), ("ops", "bearer")]
    assert servers[0].idempotent == ("search",) and servers[2].needs_approval == ("deploy",)
    assert servers[1].service == "bedrock-agentcore"
    assert AgentSettings.from_env({"SNAPLLM_AGENT_ARTIFACTS_BUCKET": BUCKET}).mcp_servers == ()


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ('[{"name": "x"', "SNAPLLM_AGENT_MCP_SERVERS is not valid JSON"),
        ('[{"name": "ops", "url": "https://h/mcp", "auth": "bearer"}]', "auth 'bearer' needs secret_arn"),
        ('[{"name": "ops", "url": "ftp://h/mcp"}]', "SNAPLLM_AGENT_MCP_SERVERS[0]['url']"),
        ('[{"name": "a b", "url": "https://h/mcp"}]', "SNAPLLM_AGENT_MCP_SERVERS[0]['name']"),
        ('[{"name": "a", "url": "https://h/mcp", "auth": "oauth"}]', "SNAPLLM_AGENT_MCP_SERVERS[0]['auth']"),
        ('[{"name": "a", "url": "https://h/mcp"}, {"name": "a", "url": "https://i/mcp"}]', "twice"),
    ],
)
def test_a_bad_mcp_server_entry_fails_the_init_naming_it(servers, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        AgentSettings.from_env(
            {"SNAPLLM_AGENT_ARTIFACTS_BUCKET": BUCKET, "SNAPLLM_AGENT_MCP_SERVERS": servers}
        )


def test_mcp_tools_get_names_the_model_may_use_and_bounded_strings():
    assert model_tool_name("docs", "search") == "docs__search"
    dotted = model_tool_name("docs", "web.search/v2")
    assert re.fullmatch(r"docs__web_search_v2_[0-9a-f]{8}", dotted) and dotted == model_tool_name(
        "docs", "web.search/v2"
    )  # stable from run to run
    long = model_tool_name("docs", "x" * 100)
    assert len(long) == 64 and long != model_tool_name("docs", "x" * 99)
    # Names that differ only in punctuation, or that a server name with "__" would make equal, stay apart.
    punctuated = {model_tool_name("docs", name) for name in ("x.y", "x_y", "x y", "x/y")}
    assert len(punctuated) == 4 and "docs__x_y" in punctuated
    assert model_tool_name("a__b", "c") != model_tool_name("a", "b__c") == "a__b__c"
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in punctuated)


def test_error_text_is_bounded_as_the_service_measures_it():
    assert bounded_text("short") == "short"
    for text in ("x" * 100_000, "\u00e9" * 40_000, "\U0001f600" * 30_000, "\n" * 50_000):
        cut = bounded_text(text)
        assert len(json.dumps(cut)) <= MAX_ERROR_TEXT_BYTES and cut.endswith("more characters)")
        assert text.startswith(cut.split(" ... (")[0])
    assert len(str(ToolTransportError("x" * 100_000)).encode()) <= MAX_ERROR_TEXT_BYTES
    schema = enforceable(
        {"type": "object", "properties": {"q": {"type": "string"}, "k": {"type": "string", "enum": ["a"]}}},
        string_limit=64,
    )
    assert schema["properties"]["q"]["maxLength"] == 64 and "maxLength" not in schema["properties"]["k"]


def test_local_mcp_flags_add_servers_to_the_agent_variable():
    base = {"SNAPLLM_AGENT_MCP_SERVERS": json.dumps([{"name": "a", "url": "http://127.0.0.1:1/mcp"}])}
    out = with_mcp_servers(base, ["b=http://127.0.0.1:2/mcp"])
    assert [s["name"] for s in json.loads(out["SNAPLLM_AGENT_MCP_SERVERS"])] == ["a", "b"]
    assert with_mcp_servers({}, []) == {}
    with pytest.raises(ValueError, match="NAME=URL"):
        with_mcp_servers({}, ["no-url"])


def test_each_approval_has_its_own_callback_and_review_document():
    assert review_document(APPROVAL_CALLBACK) == "approval-request.json"
    assert tool_approval_callback(3) == "approve call 3"
    assert review_document(tool_approval_callback(3)) == "approval-call-3.json"
    assert is_approval_callback("approval") and is_approval_callback("approve call 1")
    assert not is_approval_callback("plan") and not is_approval_callback(None)


def test_tool_retry_rules_retry_a_repeat_only_when_it_is_safe():
    unreachable, broken = ToolServerUnreachableError("refused"), ToolTransportError("reset")
    assert TOOL_RETRY(unreachable, 1).should_retry and TOOL_RETRY(broken, 1).should_retry
    assert TOOL_ONCE_RETRY(unreachable, 1).should_retry  # nothing was sent
    assert not TOOL_ONCE_RETRY(broken, 1).should_retry  # it may have taken effect
    assert not TOOL_RETRY(unreachable, 4).should_retry  # attempts are bounded
    assert not TOOL_RETRY(ToolServerRejectedError("401"), 1).should_retry


def test_a_plan_cut_short_keeps_the_steps_it_finished():
    text = (
        '{ "steps": [{"tool": "a", "arguments": {"x": 1}} ,\n {"tool": "b", "arguments": {}}, '
        '{"tool": "c", "argu'
    )
    assert complete_items(text, "steps") == [
        {"tool": "a", "arguments": {"x": 1}},
        {"tool": "b", "arguments": {}},
    ]
    assert complete_items('{ "ste', "steps") == [] and complete_items('{"steps": [', "steps") == []


class _CutAtTheDeadline:
    """What the inference function answers when its invoke's time ran out after two tokens."""

    def invoke(self, payload: dict, *, deadline: float | None = None) -> dict:
        return {
            "choices": [
                {"message": {"role": "assistant", "content": '{"steps": ['}, "finish_reason": "length"}
            ],
            "usage": {"completion_tokens": 2},
            "deadline_reached": True,
        }


def test_an_answer_cut_at_the_invoke_deadline_is_a_retried_error_not_a_short_answer():
    with pytest.raises(InferenceDeadlineError, match="stopped at its invoke deadline after 2 of 320 tokens"):
        complete(_CutAtTheDeadline(), [{"role": "user", "content": "plan"}], max_tokens=320)
    assert INFERENCE_RETRY(InferenceDeadlineError("cut"), 1).should_retry


class _PromptPastTheDeadline:
    """What the inference client raises when the function's time ran out during the prompt's evaluation."""

    def invoke(self, payload: dict, *, deadline: float | None = None) -> dict:
        raise DeadlineExceededError(
            "the prompt could not be evaluated within the time limit (256 of its 900 tokens were evaluated "
            "in 25.1 s; the next 9.8 s would pass it): there is no answer to return; send a shorter prompt"
        )


def test_a_prompt_cut_at_the_invoke_deadline_is_the_same_retried_error():
    with pytest.raises(InferenceDeadlineError, match="stopped at its invoke deadline: the prompt could not"):
        complete(_PromptPastTheDeadline(), [{"role": "user", "content": "plan"}], max_tokens=320)


class _Rendered(Exception):
    def __str__(self) -> str:
        return "rendered " * 10_000


def test_any_step_failure_is_bounded_keeping_its_type_where_it_can():
    long = InferenceFailedError("the model function failed: " + "x" * 100_000)
    assert bounded_failure(long) is long and len(json.dumps(str(long))) <= MAX_ERROR_TEXT_BYTES
    assert str(long).startswith("the model function failed: xxx")
    assert INFERENCE_RETRY(long, 1).should_retry  # still retried as what it is
    rendered = bounded_failure(_Rendered())
    assert type(rendered) is AgentError and str(rendered).startswith("_Rendered: rendered rendered")
    assert len(json.dumps(str(rendered))) <= MAX_ERROR_TEXT_BYTES
    short = ValueError("short")
    assert bounded_failure(short) is short and str(short) == "short"


# --- The agent's declared prefixes ------------------------------------------------------------------------

SHIPPED_AGENT_PREFIXES = REPO / "src/snapllm/protocol/declared/agent.json"


def test_the_shipped_agent_prefixes_are_the_agents_own_prompts():
    """``snapllm:agent`` (the template's default PromptPrefixes) is the file the inference function
    evaluates before its snapshot: it must be the system messages the agent sends, or no request hits it."""
    expected = prompts.declared_prefixes(BuiltinTools().described())
    shipped = read_prefixes(SHIPPED_AGENT_PREFIXES.read_bytes(), source="agent.json")
    assert shipped == expected, (
        f"{SHIPPED_AGENT_PREFIXES.relative_to(REPO)} is out of date; it should be:\n"
        + json.dumps(expected, indent=2)
    )
