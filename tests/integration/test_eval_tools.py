"""``snapllm eval tools`` end to end on a small slice: two of BFCL's single-call cases sent to ``snapllm local
serve`` on Qwen2.5-Coder-0.5B-Instruct (started by the command), scored by BFCL's checker. The evaluation
itself is a command, not a test (docs/evaluation.md); this checks that it runs and scores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from snapllm_dev.eval.bfcl import ERROR, OUTCOMES, PASSED

pytestmark = pytest.mark.slow


def test_two_simple_cases_are_sent_scored_and_written(tmp_path):
    written = tmp_path / "tools.json"
    command = [
        sys.executable, "-m", "snapllm_dev.cli", "eval", "tools", "--serve", "snapllm",
        "--model", "qwen2.5-coder-0.5b", "--category", "simple", "--cases", "2", "--threads", "1",
        "--n-ctx", "2048", "--max-tokens", "128", "--json", str(written),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(written.read_text())
    outcomes = [case["outcome"] for case in result["cases"]]
    assert [case["id"] for case in result["cases"]] == ["simple_python_0", "simple_python_200"]
    assert set(outcomes) <= set(OUTCOMES) - {ERROR}
    # The model gets the first one right (the area of a triangle from its base and height).
    assert outcomes[0] == PASSED, result["cases"][0]
    assert "simple" in run.stdout and "snapllm" in run.stdout and "passed" in run.stdout
