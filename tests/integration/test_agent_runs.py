"""The agent's HTTP side end to end: Powertools routes -> AgentRuns -> durable executions of the real agent.

The durable service is the SDK's in-process testing runner behind LocalDurableLambda, which answers the
five Lambda API calls AgentRuns makes with the service's response shapes; the model is the real one.

These tests are about a run's life over HTTP (start, approval, result, versions), so the runs they start
name no document: the agent then has no tool to plan with, and the model only writes a short answer
(test_agent.py runs the tools). The uploaded document is for the checks of the input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from snapllm.agent import routes
from snapllm.agent.runs import AgentRuns
from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.durable import LocalAgent
from snapllm_dev.local.durable_service import LocalDurableLambda
from snapllm_dev.local.session import LocalDeployment
from tests.support.agent import AGENT_GROUP, SHORT_ANSWER_TOKENS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(AGENT_GROUP)]

NOTES = (
    b"# Notes\n\nSnapStart restores a snapshot of an initialized function instead of initializing it again.\n"
)


@pytest.fixture(scope="module")
def api(
    deployment: LocalDeployment, agent: LocalAgent
) -> Iterator[tuple[APIGatewayHttpResolver, LocalDurableLambda, str, LocalAgent]]:
    agent = replace(agent, settings=agent.with_settings(answer_max_tokens=SHORT_ANSWER_TOKENS))
    key = f"{agent.settings.artifacts_prefix}documents/http-notes.md"
    deployment.s3.client().put_object(Bucket=agent.settings.artifacts_bucket, Key=key, Body=NOTES)
    with agent.durable_service() as service:
        routes.configure(AgentRuns(service, function_arn=service.function_arn, records=agent.run_records()))
        # Mounted as the router function mounts it: next to the OpenAI routes, behind the router's
        # validation and error handlers.
        routes_table = json.dumps({"smollm2": "local:InferenceFunction"})
        router = RouterApp(
            RouterSettings.from_env({"SNAPLLM_ROUTES": routes_table}),
            {"smollm2": agent.inference},
            routers=[routes.router],
        )
        try:
            yield router.resolver, service, f"s3://{agent.settings.artifacts_bucket}/{key}", agent
        finally:
            routes.configure(None)


def _call(resolver: APIGatewayHttpResolver, method: str, path: str, body: Any = None, **headers: str):
    event = http_api_event(
        method,
        path,
        body=b"" if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
    )
    response = resolver.resolve(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
    return response["statusCode"], json.loads(response["body"] or "null")


def _until(resolver: APIGatewayHttpResolver, run_id: str, predicate: Any, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = _call(resolver, "GET", f"/v1/agent/runs/{run_id}")
        assert status == 200, body
        if predicate(body):
            return body
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never reached the expected state: {body}")


def test_idempotent_start_approval_and_result_over_http(api):
    resolver, service, _uri, _agent = api
    runner = service.runner
    request = {"task": "Say what SnapStart restores.", "approval": {"required": True}}

    status, first = _call(resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "review-42"})
    assert status == 202, first
    status, again = _call(resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "review-42"})
    assert status == 202 and again["id"] == first["id"] and again["execution_arn"] == first["execution_arn"]
    # The runner itself holds exactly one execution under that name: the key never started a second run.
    assert len(runner._executor.list_executions(execution_name=first["id"]).durable_executions) == 1

    status, conflict = _call(
        resolver,
        "POST",
        "/v1/agent/runs",
        {**request, "task": "Something else."},
        **{"Idempotency-Key": "review-42"},
    )
    assert status == 409 and conflict["error"]["code"] == "idempotency_conflict"

    waiting = _until(resolver, first["id"], lambda run: run["waiting_for_approval"])
    assert waiting["status"] == "RUNNING" and waiting["result"] is None

    approval = {"approved": True, "approver": "alice", "reason": "fine"}
    status, answer = _call(resolver, "POST", f"/v1/agent/runs/{first['id']}/approval", approval)
    assert status == 200 and answer == {"id": first["id"], "approval": "approved"}
    status, repeated = _call(resolver, "POST", f"/v1/agent/runs/{first['id']}/approval", approval)
    assert status == 409 and repeated["error"]["code"] == "approval_already_recorded"

    done = _until(resolver, first["id"], lambda run: run["status"] != "RUNNING")
    assert done["status"] == "SUCCEEDED", done
    assert done["result"]["status"] == "completed" and done["result"]["answer"].strip()
    assert done["result"]["approval"]["approver"] == "alice"


def test_clear_client_errors(api):
    resolver, _service, uri, _agent = api
    status, body = _call(resolver, "GET", "/v1/agent/runs/run-0000000000000000000000000000000000000000")
    assert status == 404 and body["error"]["code"] == "run_not_found"

    status, body = _call(resolver, "POST", "/v1/agent/runs", {"task": "no key"})
    assert status == 400 and "idempotency-key" in body["error"]["message"].lower()
    status, body = _call(resolver, "POST", "/v1/agent/runs", {"documents": []}, **{"Idempotency-Key": "k"})
    assert status == 400 and body["error"]["param"] == "task"
    bad_uri = {"task": "Read it.", "documents": ["https://example.com/a.md"]}
    status, body = _call(resolver, "POST", "/v1/agent/runs", bad_uri, **{"Idempotency-Key": "k"})
    assert status == 400 and body["error"]["param"] == "documents.0"
    twice = {"task": "Read it.", "documents": [uri, uri]}
    status, body = _call(resolver, "POST", "/v1/agent/runs", twice, **{"Idempotency-Key": "k"})
    assert status == 400 and "repeat" in body["error"]["message"]
    status, body = _call(resolver, "POST", "/v1/agent/runs", "not an object", **{"Idempotency-Key": "k"})
    assert status == 400

    request = {"task": "Say what SnapStart restores."}
    status, run = _call(resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "no-approval"})
    assert status == 202
    _until(resolver, run["id"], lambda r: r["status"] != "RUNNING")
    status, body = _call(resolver, "POST", f"/v1/agent/runs/{run['id']}/approval", {"approved": True})
    assert status == 409 and body["error"]["code"] == "run_not_waiting_for_approval"
    # A decision is a JSON boolean: "yes" is not coerced into an approval.
    status, body = _call(resolver, "POST", f"/v1/agent/runs/{run['id']}/approval", {"approved": "yes"})
    assert status == 400 and body["error"]["param"] == "approved"


def test_a_failed_run_reports_a_public_error_type(api):
    resolver, _service, uri, _agent = api
    missing = uri.rsplit("/", 1)[0] + "/no-such-document.md"
    request = {"task": "Read it.", "documents": [missing]}
    status, run = _call(resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "missing-doc"})
    assert status == 202, run

    failed = _until(resolver, run["id"], lambda r: r["status"] != "RUNNING")
    assert failed["status"] == "FAILED"
    # Not the SDK's wrapper (ChildContextError) nor any Python class name: the agent error's public code.
    assert failed["error"] == {"type": "document_not_found", "message": f"{missing} does not exist"}


def test_a_run_waiting_for_approval_survives_a_redeploy(api):
    """Version 1 starts the run; a redeploy publishes version 2 and moves the alias; the run is still read,
    approved and finished on version 1, through the execution ARN kept with it."""
    resolver, service, _uri, agent = api
    request = {"task": "Say what SnapStart restores.", "approval": {"required": True}}
    status, run = _call(resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "before-redeploy"})
    assert status == 202, run
    version = service.current_version
    assert f":{version}/durable-execution/{run['id']}/" in run["execution_arn"]
    _until(resolver, run["id"], lambda r: r["waiting_for_approval"])

    with agent.version() as runner:
        new_version = service.publish(runner)
        try:
            _approve_after_the_redeploy(resolver, service, request, run, version, new_version)
        finally:
            service.versions.pop(new_version)  # the later tests run on the fixture's one version


def _approve_after_the_redeploy(resolver, service, request, run, version, new_version):
    """What the API answers once version `new_version` holds the alias, for a run started on `version`."""
    assert new_version == str(int(version) + 1) and service.current_version == new_version
    # Looked up by name on the alias, the run is gone: the alias now resolves to the new version.
    unqualified = service.function_arn.rsplit(":", 1)[0]
    listed = service.list_durable_executions_by_function(
        FunctionName=unqualified, Qualifier="live", DurableExecutionName=run["id"]
    )
    assert listed["DurableExecutions"] == []

    # The same start again finds the run it recorded: no second run on the new version.
    status, again = _call(
        resolver, "POST", "/v1/agent/runs", request, **{"Idempotency-Key": "before-redeploy"}
    )
    assert status == 202 and again["execution_arn"] == run["execution_arn"]
    waiting = _until(resolver, run["id"], lambda r: r["waiting_for_approval"])
    assert waiting["status"] == "RUNNING"
    approval = {"approved": True, "approver": "carol", "reason": "after the redeploy"}
    status, answer = _call(resolver, "POST", f"/v1/agent/runs/{run['id']}/approval", approval)
    assert status == 200 and answer == {"id": run["id"], "approval": "approved"}
    done = _until(resolver, run["id"], lambda r: r["status"] != "RUNNING")
    assert done["status"] == "SUCCEEDED" and done["result"]["approval"]["approver"] == "carol"

    # A new run starts on the new version.
    status, fresh = _call(
        resolver,
        "POST",
        "/v1/agent/runs",
        {**request, "approval": {"required": False}},
        **{"Idempotency-Key": "after-redeploy"},
    )
    assert status == 202 and f":{new_version}/durable-execution/" in fresh["execution_arn"]
    finished = _until(resolver, fresh["id"], lambda r: r["status"] != "RUNNING")
    assert finished["status"] == "SUCCEEDED", finished
