"""Durable agent runs over ``snapllm local serve``'s HTTP API: the repository's own review event is posted as
it is (its documents were uploaded to the local S3 at start), waits for approval, is approved, and ends
with an answer from the real model."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.serve import SERVER_GROUP, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SERVER_GROUP)]


@pytest.fixture(scope="module")
def api(server: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _until(api: httpx.Client, run_id: str, predicate: Any, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = api.get(f"/v1/agent/runs/{run_id}")
        assert run.status_code == 200, run.text
        if predicate(run.json()) or time.monotonic() > deadline:
            return run.json()
        time.sleep(0.25)


def test_the_review_event_runs_to_an_approved_answer(api):
    event = json.loads((REPO / "events" / "agent" / "review.json").read_text())
    key = {"Idempotency-Key": f"serve-{uuid.uuid4()}"}
    started = api.post("/v1/agent/runs", json=event, headers=key)
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]

    waiting = _until(api, run_id, lambda run: run["waiting_for_approval"] or run["status"] != "RUNNING")
    assert waiting["status"] == "RUNNING" and waiting["approval"] == "waiting", waiting

    decision = {"approved": True, "approver": "reviewer", "reason": "looks right"}
    answered = api.post(f"/v1/agent/runs/{run_id}/approval", json=decision)
    assert answered.json() == {"id": run_id, "approval": "approved"}

    done = _until(api, run_id, lambda run: run["status"] != "RUNNING")
    assert done["status"] == "SUCCEEDED", done
    assert done["approval"] == "decided" and done["result"]["answer"].strip()
    assert done["result"]["approval"]["approver"] == "reviewer"


def test_unknown_runs_and_bad_starts_get_structured_errors(api):
    missing = api.get("/v1/agent/runs/run-does-not-exist")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
    no_key = api.post("/v1/agent/runs", json={"task": "Summarize."})
    assert no_key.status_code == 400 and "idempotency-key" in no_key.json()["error"]["message"]
