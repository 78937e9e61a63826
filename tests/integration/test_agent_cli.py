"""``snapllm local invoke AgentFunction`` as a user runs it: result JSON on stdout, the table on stderr.

The approval's two answers run in this process through ``main(argv)`` (:func:`~tests.support.cli.run_main`),
their output read at the file descriptors, where the inference function's process writes too, and must leave
no thread or child process behind. The MCP run is a process of its own, as a user's is beside the server: the
server runs in this process, and its tools' worker threads (and the schema compile thread the command starts
for the life of its process) would pass for threads the command left running."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.support.cli import InProcessRun, run_main
from tests.support.generation import TEST_THREADS
from tests.support.mcp_server import ToolServer
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

REVIEW = REPO / "events/agent/review.json"

Invoker = Callable[..., InProcessRun]


@pytest.fixture
def invoke(capfd, caplog) -> Invoker:
    """``snapllm local invoke AgentFunction FLAGS`` in this process; it must leave nothing running."""

    def run(*flags: str) -> InProcessRun:
        done = run_main(
            ["local", "invoke", "AgentFunction", "--model", "smollm2-135m", *flags],
            capfd,
            env={"SNAPLLM_THREADS": TEST_THREADS},
            caplog=caplog,
        )
        assert not done.leftovers, f"left running: {done.leftovers}\n{done.stderr[-3000:]}"
        return done

    return run


def test_approve_prints_the_result_and_the_operation_table(invoke):
    done = invoke("-e", "events/agent/review.json", "--approve", "--reason", "ship it")

    assert done.code == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["answer"].strip()
    assert result["approval"]["reason"] == "ship it"
    documents = set(json.loads(REVIEW.read_text())["documents"])
    assert result["plan"] and all(step["arguments"]["uri"] in documents for step in result["plan"])
    assert len(result["findings"]) == len(result["plan"])
    table = done.stderr[done.stderr.index("operation ") :]
    for name in ("plan", "run tools", "  choose call 1", "approval", "request approval", "answer"):
        assert f"\n{name} " in table
    assert "\n  call 1 " in table
    assert "largest checkpointed operation:" in table and "(budget 65,536 B, OK)" in table


def test_reject_prints_a_cancelled_result(invoke, tmp_path):
    # The review event without its documents: every built-in tool reads one, so the run plans no call and
    # asks for the approval without a model call (test_agent.py rejects a run after its tool calls).
    event = tmp_path / "review.json"
    event.write_text(
        json.dumps({k: v for k, v in json.loads(REVIEW.read_text()).items() if k != "documents"})
    )
    done = invoke("-e", str(event), "--reject")

    assert done.code == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "cancelled"
    assert result["reason"] == "rejected by cli: rejected with --reject"


def test_mcp_adds_a_real_mcp_servers_tools_and_the_table_shows_each_call():
    event = json.dumps(
        {"task": "Look up what SnapStart does with the tools.", "approval": {"required": False}}
    )
    with ToolServer.start() as server:
        done = subprocess.run(
            [
                *[
                    sys.executable,
                    "-m",
                    "snapllm_dev.cli",
                    "local",
                    "invoke",
                    "AgentFunction",
                    "-e",
                    "-",
                    "--model",
                    "smollm2-135m",
                ],
                *["--mcp", f"ops={server.url}", "--env", "SNAPLLM_AGENT_MAX_TOOL_CALLS=2", "--approve"],
            ],
            cwd=REPO,
            input=event,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert result["plan"] and all(step["tool"].startswith("ops__") for step in result["plan"])
    table = done.stderr[done.stderr.index("operation ") :]
    assert "\nlist tools ops " in table
    rows = [line.split() for line in table.splitlines() if line.startswith("  call ")]
    # one row per call, each a step with its checkpointed bytes; the server counted each call once
    assert len(rows) == len(result["plan"]) and all(row[-2].replace(",", "").isdigit() for row in rows)
    assert all(row[-1] == "B" and row[3] == "STEP" for row in rows)
    assert sum(server.calls.values()) == len(rows)
