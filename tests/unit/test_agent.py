"""Agent building blocks without the model: input parsing, chunk planning, retries, the state budget."""

from __future__ import annotations

import hashlib
import json

import pytest

from snapllm.agent.artifacts import ArtifactStore, S3Location
from snapllm.agent.budget import OFFLOADED, StateBudget, checkpoint_size, is_offloaded
from snapllm.agent.errors import (
    AgentInputError,
    ArtifactStoreError,
    DocumentAccessDeniedError,
    DocumentNotFoundError,
    InferenceRejectedError,
    StateBudgetExceededError,
)
from snapllm.agent.flow import _decision, tool_calls
from snapllm.agent.request import AgentRequest
from snapllm.agent.retry import INFERENCE_RETRY, NEVER_RETRY, STORAGE_RETRY
from snapllm.agent.settings import AgentSettings
from snapllm.errors import ConfigurationError, InferenceThrottledError, InferenceTimeoutError
from snapllm.local.s3 import LocalS3

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


def test_tool_calls_read_bounded_chunks_spread_over_a_large_document():
    settings = AgentSettings(
        artifacts_bucket=BUCKET, chunks_per_document=3, chunk_bytes=1000, excerpt_bytes=500
    )
    small, big = (
        {"uri": "s3://b/agent/s.md", "size": 300},
        {"uri": "s3://b/agent/big.txt", "size": 10_000_000},
    )
    calls = tool_calls([small, big], settings)

    assert [c["tool"] for c in calls] == ["read_excerpt", "summarize_chunk"] + ["read_excerpt"] + [
        "summarize_chunk"
    ] * 3
    assert calls[0]["args"] == {"uri": small["uri"], "offset": 0, "length": 300}
    assert calls[1]["args"] == {"uri": small["uri"], "offset": 0, "length": 300}
    big_chunks = [c["args"] for c in calls[3:]]
    assert [c["offset"] for c in big_chunks] == [0, 4_999_500, 9_999_000]
    assert all(c["length"] == 1000 for c in big_chunks)


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
    with pytest.raises(ConfigurationError, match="below the service"):
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
