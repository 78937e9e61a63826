"""``snapllm local invoke`` picks how to run a function from what the template says about it, not its name."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import snapllm
from tests.support.paths import REPO, TEMPLATE


def _with_second_inference_function(scratch: Path) -> Path:
    """template.yaml plus SecondInferenceFunction: a copy of InferenceFunction, code from the repository."""
    text = TEMPLATE.read_text()
    start = text.index("\n  InferenceFunction:\n")
    end = text.index("\n  AgentFunction:\n")
    second = text[start:end].replace("\n  InferenceFunction:\n", "\n  SecondInferenceFunction:\n", 1)
    second = second.replace("CodeUri: functions/inference/", f"CodeUri: {REPO / 'functions' / 'inference'}/")
    assert "SecondInferenceFunction" in second and str(REPO) in second
    template = scratch / "template.yaml"
    template.write_text(text[:end] + second + text[end:])
    return template


def test_a_second_direct_invoke_function_runs_without_code_changes(tmp_path):
    template = _with_second_inference_function(tmp_path)
    run = snapllm(
        "local", "invoke", "SecondInferenceFunction", "-e", "events/inference/chat.json", "-t", str(template)
    )
    assert run.returncode == 0, run.stderr
    response = json.loads(run.stdout)
    assert response["object"] == "chat.completion" and response["choices"][0]["message"]["content"]
    assert "S3 -> memfd" in run.stderr and "before-snapshot (warm-up)" in run.stderr


def test_a_web_adapter_function_is_served_not_invoked():
    run = snapllm("local", "invoke", "StreamFunction", "-e", "events/inference/chat.json")
    assert run.returncode == 2
    assert "Lambda Web Adapter" in run.stderr and "snapllm local serve" in run.stderr
    assert "Traceback" not in run.stderr


def test_an_unknown_function_lists_the_template_functions():
    run = snapllm("local", "invoke", "NoSuchFunction", "-e", "events/inference/chat.json")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    for name in ("InferenceFunction", "AgentFunction", "RouterFunction", "StreamFunction"):
        assert name in run.stderr
