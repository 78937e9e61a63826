"""The replay's pure parts: which events it finds, what it masks, and how it compares and re-records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from snapllm_dev.replay.cli import Verdict, check, deadlines, render
from snapllm_dev.replay.events import Approval, Manifest, ReplaySetupError
from snapllm_dev.replay.masks import MASKS, drawn_seed, masks_for, normalize, unseeded_sample
from tests.support.paths import REPO

RUN_ID = "7c1e4a52-9f3b-4d8e-a6c0-2b5d8e1f4a93"
MANIFEST = """
[functions]
inference = "InferenceFunction"
router = "RouterFunction"

[approval]
"router/b.json" = "reject"
"""


@pytest.fixture
def events(tmp_path: Path) -> Path:
    root = tmp_path / "events"
    for name in ("inference/a.json", "inference/a.expected.json", "router/b.json", "router/data/c.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")
    (root / "replay.toml").write_text(MANIFEST)
    return root


def test_every_event_of_every_mapped_folder_is_found_and_recordings_are_not_events(events: Path) -> None:
    found = Manifest.load(events).events()
    assert [(e.name, e.function, e.approval) for e in found] == [
        ("inference/a.json", "InferenceFunction", Approval.APPROVE),
        ("router/b.json", "RouterFunction", Approval.REJECT),
    ]
    assert found[0].expected_path == events.resolve() / "inference/a.expected.json"


def test_named_events_and_folders_are_found_once(events: Path) -> None:
    manifest = Manifest.load(events)
    found = manifest.events([events / "router", events / "router/b.json", events / "inference/a.json"])
    assert [e.name for e in found] == ["inference/a.json", "router/b.json"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("router/data/c.json", "its folder is not in"),
        ("missing/x.json", "no such event file or folder"),
    ],
)
def test_an_event_outside_the_mapped_folders_is_refused_by_name(
    events: Path, path: str, message: str
) -> None:
    with pytest.raises(ReplaySetupError, match=message):
        Manifest.load(events).events([events / path])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[functions", "not valid TOML"),
        ("[other]\nx = 1", r"needs a \[functions\] table"),
        ('[functions]\ninference = "InferenceFunction"\n[approval]\n"inference/a.json" = "maybe"', "approve"),
        ('[functions]\ninference = "InferenceFunction"\n[settings]\nPATH = "/tmp"', r"\[settings\]"),
        ('[functions]\ninference = "InferenceFunction"\n[settings]\nSNAPLLM_THREADS = [1]', r"\[settings\]"),
    ],
)
def test_a_bad_manifest_is_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "replay.toml").write_text(text)
    with pytest.raises(ReplaySetupError, match=message):
        Manifest.load(tmp_path)


def test_the_repository_manifest_maps_every_event_folder_and_every_event_has_a_recording() -> None:
    manifest = Manifest.load(REPO / "events")
    found = manifest.events()
    folders = {path.name for path in (REPO / "events").iterdir() if path.is_dir()}
    assert set(manifest.functions) == folders
    assert len(found) >= 18
    assert [e.name for e in found if not e.expected_path.exists()] == []


def test_the_pinned_settings_hold_over_the_shell_for_the_replay_only(
    events: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (events / "replay.toml").write_text(
        MANIFEST + '\n[settings]\nSNAPLLM_THREADS = 1\nSNAPLLM_N_CTX = "2048"\n'
    )
    monkeypatch.setenv("SNAPLLM_THREADS", "2")
    monkeypatch.delenv("SNAPLLM_N_CTX", raising=False)
    manifest = Manifest.load(events)
    with manifest.pinned():
        assert (os.environ["SNAPLLM_THREADS"], os.environ["SNAPLLM_N_CTX"]) == ("1", "2048")
    assert os.environ["SNAPLLM_THREADS"] == "2" and "SNAPLLM_N_CTX" not in os.environ


def test_the_repository_replays_pin_the_thread_count_they_were_recorded_at() -> None:
    assert Manifest.load(REPO / "events").settings == {"SNAPLLM_THREADS": "1"}


def test_only_what_varies_is_masked() -> None:
    answer = {
        "id": "chatcmpl-4f1c2a9e0b7d",
        "created": 1795323000,
        "model": "smollm2-135m-instruct",
        "choices": [{"message": {"content": "Red."}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 3},
        "timings": {"time_to_first_token_ms": 40.1},
        "seed": 7,
        "headers": {"x-amzn-RequestId": "abc", "Content-Type": "application/json"},
        "execution": f"arn:aws:lambda:us-east-1:1:function:f/durable-execution/run/{RUN_ID}",
        "error": {"errorType": "ValueError", "stackTrace": ["  File x"]},
        "duration_s": 1.2,
    }
    assert normalize(answer) == {
        "id": "<generated id>",
        "created": "<time>",
        "model": "smollm2-135m-instruct",
        "choices": [{"message": {"content": "Red."}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 3},
        "timings": "<measured>",
        "seed": 7,
        "headers": {"x-amzn-RequestId": "<request id>", "Content-Type": "application/json"},
        "execution": "arn:aws:lambda:us-east-1:1:function:f/durable-execution/run/<uuid>",
        "error": {"errorType": "ValueError", "stackTrace": "<stack trace>"},
        "duration_s": "<measured>",
    }


@pytest.mark.parametrize(
    ("request_body", "extra"),
    [
        ({"messages": [], "seed": 3, "temperature": 0.9}, None),
        ({"prompt": "x", "temperature": 0}, drawn_seed),
        ({"prompt": "x"}, unseeded_sample),  # the default temperature samples
        ({"messages": [], "temperature": 0.2}, unseeded_sample),
        ({"path": "/v1/models"}, None),
        (None, None),
    ],
)
def test_requests_without_a_seed_mask_what_the_drawn_seed_changes(
    request_body: object, extra: object
) -> None:
    assert masks_for(request_body) == (MASKS if extra is None else (*MASKS, extra))


def test_a_changed_answer_fails_with_a_diff_and_update_records_it(events: Path) -> None:
    event = Manifest.load(events).events([events / "inference/a.json"])[0]
    event.expected_path.write_text(render({"text": "Paris", "usage": {"completion_tokens": 2}}))

    verdict, change = check(event, {"text": "Lyon", "usage": {"completion_tokens": 2}}, update=False)
    assert verdict is Verdict.FAILED
    assert '-  "text": "Paris"' in change and '+  "text": "Lyon"' in change

    assert (
        check(event, {"text": "Lyon", "usage": {"completion_tokens": 2}}, update=True)[0] is Verdict.RECORDED
    )
    assert json.loads(event.expected_path.read_text())["text"] == "Lyon"
    assert check(event, {"usage": {"completion_tokens": 2}, "text": "Lyon"}, update=False) == (
        Verdict.PASSED,
        "",
    )


def test_an_event_without_a_recording_fails_until_one_is_recorded(events: Path) -> None:
    event = Manifest.load(events).events([events / "router/b.json"])[0]
    verdict, change = check(event, {"statusCode": 200}, update=False)
    assert verdict is Verdict.UNRECORDED and '+  "statusCode": 200' in change
    assert not event.expected_path.exists()


def test_an_answer_a_deadline_cut_is_reported_by_name_not_compared_or_recorded(events: Path) -> None:
    event = Manifest.load(events).events([events / "inference/a.json"])[0]
    recorded = {"response": {"choices": [{"text": "Paris is the capital", "finish_reason": "stop"}]}}
    event.expected_path.write_text(render(recorded))
    cut = {"response": {"choices": [{"text": "Paris", "finish_reason": "length"}], "deadline_reached": True}}

    for update in (False, True):
        verdict, change = check(event, cut, update=update)
        assert verdict is Verdict.DEADLINE
        assert change == "the answer was cut by a deadline on this machine (response.deadline_reached)\n"
    assert json.loads(event.expected_path.read_text()) == recorded  # --update kept the whole answer


def test_a_timeout_error_is_a_deadline_unless_the_recording_holds_the_same() -> None:
    agent_run = {"status": "FAILED", "error": {"ErrorType": "snapllm.errors.InferenceTimeoutError"}}
    http = {"statusCode": 504, "body": {"error": {"type": "timeout_error", "code": "timeout"}}}
    assert deadlines(agent_run) == ["error.ErrorType = snapllm.errors.InferenceTimeoutError"]
    assert deadlines(http) == ["body.error.type = timeout_error"]
    assert deadlines({"body": {"properties": {"deadline_reached": {"type": "boolean"}}}}) == []


def test_an_event_that_records_a_deadline_is_compared_as_usual(events: Path) -> None:
    event = Manifest.load(events).events([events / "inference/a.json"])[0]
    recorded = {"response": {"text": "Par", "deadline_reached": True}}
    event.expected_path.write_text(render(recorded))
    assert check(event, recorded, update=False) == (Verdict.PASSED, "")
    verdict, _ = check(event, {"response": {"text": "Pa", "deadline_reached": True}}, update=False)
    assert verdict is Verdict.FAILED
