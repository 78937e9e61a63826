"""`snapllm replay` (what `make replay` runs), called in this process through ``main(argv)``: every event in
events/ through its function on the local stack, with the real model, against the answers recorded beside
them; an altered recording beside an unusable event, and a replay slowed past its deadlines. Each replay
must leave no thread or child process behind, as its own process would on exit."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import InProcessRun, run_main
from tests.support.generation import TEST_THREADS
from tests.support.paths import REPO

Replayer = Callable[..., InProcessRun]


@pytest.fixture
def snapllm_replay(capfd, caplog) -> Replayer:
    """``snapllm replay ARGS`` in this process as its own process would run it (:func:`run_main`), generating
    on the tests' one thread, with ``env`` over the environment; it must leave nothing running."""

    def replay(*args: str, env: dict[str, str] | None = None) -> InProcessRun:
        run = run_main(
            ["replay", *args], capfd, env={"SNAPLLM_THREADS": TEST_THREADS, **(env or {})}, caplog=caplog
        )
        assert not run.leftovers, f"left running: {run.leftovers}\n{run.stderr[-3000:]}"
        return run

    return replay


def test_every_event_in_the_repository_replays_as_recorded(snapllm_replay):
    # At the machine's two threads, as `make replay` runs: the manifest pins the thread count the events were
    # recorded at (the agent's answers differ at two threads).
    run = snapllm_replay(env={"SNAPLLM_THREADS": "2"})
    assert run.code == 0, run.stdout + run.stderr[-4000:]
    assert "FAILED" not in run.stdout and "passed" in run.stdout
    # The recorded AWS shapes are among them: an IAM-authorized, base64 API Gateway event, the router's
    # direct invoke payload, and a durable function's invocation envelope.
    for name in (
        "router/recorded-iam-chat.json",
        "inference/recorded-router-invoke.json",
        "agent/recorded-durable-invocation.json",
    ):
        assert f"passed  {name}" in run.stdout


def _copy_events(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "events"
    root.mkdir()
    shutil.copy(REPO / "events/replay.toml", root)
    for name in names:
        for path in (REPO / "events" / name, (REPO / "events" / name).with_suffix(".expected.json")):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, root / path.relative_to(REPO / "events"))
    return root


def test_an_altered_expectation_fails_with_a_diff_beside_an_unusable_event_named_and_update_restores_it(
    tmp_path, snapllm_replay
):
    root = _copy_events(tmp_path, "inference/completion.json", "router/models.json", "router/health.json")
    expected = root / "inference/completion.expected.json"
    recorded = json.loads(expected.read_text())
    true_text = recorded["response"]["choices"][0]["text"]
    recorded["response"]["choices"][0]["text"] = "an altered expectation"
    expected.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    # An event that cannot be replayed is named, and the others still run.
    (root / "router/broken.json").write_text("{not json")

    failing = snapllm_replay("--events", str(root))
    assert failing.code == 1, failing.stdout + failing.stderr[-3000:]
    assert "FAILED  inference/completion.json" in failing.stdout
    assert "passed  router/models.json" in failing.stdout
    assert '-        "text": "an altered expectation"' in failing.stdout
    assert f'+        "text": {json.dumps(true_text)}' in failing.stdout
    assert "snapllm replay --update" in failing.stdout and "Traceback" not in failing.stdout + failing.stderr
    assert "UNUSABLE  router/broken.json" in failing.stdout and "is not valid JSON" in failing.stdout
    assert "passed  router/health.json" in failing.stdout

    (root / "router/broken.json").unlink()
    update = snapllm_replay("--events", str(root), "--update")
    assert update.code == 0, update.stdout + update.stderr[-3000:]
    assert (
        "recorded  inference/completion.json" in update.stdout
        and "unchanged  router/models.json" in update.stdout
    )
    assert expected.read_text() == (REPO / "events/inference/completion.expected.json").read_text()


def test_a_replay_slowed_past_its_deadlines_reports_them_by_name(tmp_path, snapllm_replay):
    # The pace of a machine far too slow for the events: the engine keeps back all but 20 ms of each invoke's
    # time (the inference function's 120 s; the router's 27 s is gone at once), so every generation stops
    # at its deadline. A direct invoke and a router request come back cut; the agent's run retries its
    # timed-out plan and then fails naming the timeout. None of them may pass or fail as a different text.
    names = ("inference/completion.json", "router/chat.json", "agent/quick.json", "router/models.json")
    root = _copy_events(tmp_path, *names)
    run = snapllm_replay("--events", str(root), env={"SNAPLLM_DEADLINE_MARGIN_MS": "119980"})

    assert run.code == 1, run.stdout + run.stderr[-3000:]
    for name, where in (
        ("inference/completion.json", "response.deadline_reached"),
        ("router/chat.json", "body.deadline_reached"),
        ("agent/quick.json", "error.ErrorType = snapllm.agent.errors.InferenceDeadlineError"),
    ):
        assert f"DEADLINE  {name}" in run.stdout
        assert f"{name} reached a deadline after " in run.stdout and where in run.stdout
    assert "passed  router/models.json" in run.stdout  # no generation, no deadline
    # (stderr holds the functions' logs, where the durable SDK logs each failed attempt with its trace.)
    assert "FAILED" not in run.stdout and "Traceback" not in run.stdout
    # Nothing was re-recorded from a cut answer.
    for name in names:
        assert (root / name).with_suffix(".expected.json").read_text() == (
            (REPO / "events" / name).with_suffix(".expected.json").read_text()
        )
