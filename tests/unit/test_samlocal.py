"""`make sam-local`'s reading of SAM's output and its expectations, on output recorded from real runs.

The runs themselves need Docker and the SAM CLI's containers (`make sam-local`, which CI runs); these tests
pin what is parsed from them, so a change in SAM's wording fails here with a readable message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.samlocal import docker
from snapllm_dev.samlocal.cli import web_adapter_problems
from snapllm_dev.samlocal.samcli import _EXECUTION_ARN, Report, SamCli, _response, remove_orphaned_build_locks
from snapllm_dev.samlocal.scenario import (
    STEPS,
    _callback_ids,
    completion,
    http,
    models_listed,
    refused,
    run_finished,
)
from snapllm_dev.samlocal.stage import (
    CONNECTION_TIMEOUT_VARIABLE,
    EMULATED_CONNECTION_TIMEOUT_S,
    EMULATED_INVOKE_TIMEOUT_S,
    OVERLAY_NAME,
    _connection_timeout,
    _timeouts,
    _write_overlay,
)
from tests.support.paths import REPO, TEMPLATE

# stderr of `sam local invoke InferenceFunction` (SAM 1.170, the stand-in image), less the function's logs.
INVOKE_STDERR = """No current session found, using default AWS::AccountId
Invoking app.handler (python3.13)
SnapllmLayerX86 is a local Layer in the template
Mounting /work/.aws-sam/build-x86_64/InferenceFunction as /var/task:ro,delegated, inside runtime container
START RequestId: f8e6efb3-2518-4f9f-b27e-d5aafdda87a7 Version: $LATEST
{"timestamp": "2026-11-24T06:04:52Z", "level": "INFO", "message": "model ready", \
"logger": "snapllm.inference", "phases": {"s3_to_memfd": 0.178, "model_load": 0.117, "init": 0.468}}
END RequestId: f8e6efb3-2518-4f9f-b27e-d5aafdda87a7
REPORT RequestId: f8e6efb3-2518-4f9f-b27e-d5aafdda87a7\tInit Duration: 0.04 ms\tDuration: 2449.02 ms\t\
Billed Duration: 2450 ms\tMemory Size: 10240 MB\tMax Memory Used: 10240 MB\t
"""
DURABLE_STDERR = """Using external durable functions emulator: localhost:32961
SAM_CONTAINER_ID: e17a0e21d0d13e55734b146c021820979457653ffd06f3c6726bc44cd6b4915f

Durable execution started
=========================
ARN: 8b3ece9c-ce16-4792-989d-5251aa11fd83/2d49f2f0-5cf4-4c87-8624-79062346efe9
"""


def test_the_report_line_gives_the_containers_duration_and_the_functions_own_init():
    report = Report.parse(INVOKE_STDERR)
    assert report.duration_ms == 2449.02  # not the Billed Duration, not the emulator's Init Duration
    assert report.memory_mb == 10240
    assert report.init_phases_s == {"s3_to_memfd": 0.178, "model_load": 0.117, "init": 0.468}


def test_output_without_a_report_gives_an_empty_report():
    assert Report.parse("Error: Running AWS SAM projects locally requires a container runtime") == Report()


def test_the_execution_arn_is_read_from_what_sam_prints_when_a_durable_run_starts():
    found = _EXECUTION_ARN.findall(DURABLE_STDERR)
    assert found == ["8b3ece9c-ce16-4792-989d-5251aa11fd83/2d49f2f0-5cf4-4c87-8624-79062346efe9"]


def test_the_response_is_the_json_on_stdout_even_after_notices():
    assert _response('Some notice\n{"statusCode": 200}\n') == {"statusCode": 200}
    assert _response('{\n  "a": 1\n}\n') == {"a": 1}


def test_callback_ids_are_found_wherever_the_history_nests_them():
    history = {
        "Events": [
            {"EventType": "ExecutionStarted", "Id": "1"},
            {
                "EventType": "CallbackStarted",
                "CallbackStartedDetails": {"CallbackId": "cb-1", "Timeout": 259200},
            },
        ]
    }
    assert _callback_ids(history) == ["cb-1"]
    assert _callback_ids({"Events": []}) == []


def test_expectations_accept_the_right_answer_and_name_what_is_wrong_with_another():
    chat = {"choices": [{"message": {"content": "Hello"}}]}
    assert completion(chat) is None
    assert completion({"choices": []}) == "no choices[0].message.content"
    assert refused(400, "temperature")({"statusCode": 400, "error": {"param": "temperature"}}) is None
    assert refused(400, "temperature")({"statusCode": 400, "error": {"param": "top_p"}})
    listed = {"statusCode": 200, "body": json.dumps({"data": [{"id": "m"}]})}
    assert http(200, models_listed)(listed) is None
    assert http(404)(listed) == "expected HTTP 404, got 200"
    run = {"Status": "SUCCEEDED", "Result": {"approval": {"approved": False}, "status": "cancelled"}}
    assert run_finished(False)(run) is None
    assert run_finished(True)(run) == "expected approval.approved True, got False"
    assert run_finished(True)({"Status": "FAILED"})


def test_every_event_the_scenario_sends_exists():
    for step in STEPS:
        assert (REPO / step.event).is_file(), step.event


def test_the_overlay_declares_local_variables_and_changes_nothing_else(tmp_path):
    (tmp_path / "template.yaml").write_text(TEMPLATE.read_text())
    overlay = _write_overlay(tmp_path, {"InferenceFunction": ["AWS_ENDPOINT_URL_S3"]}, {})
    assert overlay.name == OVERLAY_NAME
    written = json.loads(overlay.read_text())
    original = sam.read(TEMPLATE)
    variables = written["Resources"]["InferenceFunction"]["Properties"]["Environment"]["Variables"]
    assert variables.pop("AWS_ENDPOINT_URL_S3") == ""
    assert written == original


def test_invoke_commands_are_the_ones_a_person_would_type():
    cli = SamCli(
        Path(".tools/bin/sam"),
        template=Path("t.json"),
        env_vars=Path("env.json"),
        container_host="172.17.0.1",
        parameter_overrides={"Architecture": "x86_64"},
    )
    assert cli.invoke_command("InferenceFunction", Path("events/inference/chat.json")) == [
        ".tools/bin/sam",
        "local",
        "invoke",
        "InferenceFunction",
        "--event",
        "events/inference/chat.json",
        "--template",
        "t.json",
        "--env-vars",
        "env.json",
        "--skip-pull-image",
        "--parameter-overrides",
        "Architecture=x86_64",
    ]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: f"{s.role}-{s.event.stem}")
def test_each_step_names_a_role_the_stack_has(step):
    assert step.role in {"model", "router"}


def test_orphaned_build_locks_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / "samcli_lambda-python_3.13-x86_64-abc.building.lock"
    orphan.write_text(f"{dead.pid}\n1795501268.5")
    orphan.with_suffix(".status").write_text("building\n1795501268.5")
    held = tmp_path / "samcli_lambda-python_3.13-arm64-def.building.lock"
    held.write_text(f"{os.getpid()}\n1795501268.5")

    assert remove_orphaned_build_locks(tmp_path) == [orphan]
    assert not orphan.exists() and not orphan.with_suffix(".status").exists()
    assert held.exists()


GOOD_ADAPTER_REPORT = {
    "readiness": {"status": 200, "seconds": 1.2},
    "before_checkpoint": {"path": "/_snapllm/snapstart/before-checkpoint", "status": 200, "seconds": 0.4},
    "after_restore": {"path": "/_snapllm/snapstart/after-restore", "status": 200, "seconds": 0.01},
    "stream": {"status": 200, "chunks": 9, "done": True, "text": "Red.", "first_event_seconds": 0.05},
    "refused": {"status": 400, "body": {"error": {"param": "temperature"}}},
}


def test_a_web_adapter_function_that_streams_and_refuses_as_it_should_has_no_problems() -> None:
    assert web_adapter_problems(GOOD_ADAPTER_REPORT) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"readiness": {"status": None, "seconds": 300}}, "never answered its readiness check"),
        ({"after_restore": {"status": 404}}, "after_restore hook answered 404"),
        ({"stream": {**GOOD_ADAPTER_REPORT["stream"], "done": False}}, "did not stream text to [DONE]"),
        ({"refused": {"status": 500}}, "instead of a 400"),
    ],
)
def test_what_a_web_adapter_function_got_wrong_is_named(change: dict, problem: str) -> None:
    problems = web_adapter_problems({**GOOD_ADAPTER_REPORT, **change})
    assert len(problems) == 1 and problem in problems[0]


# The engine's answers as `docker network inspect bridge` gives them: `make sam-local` asks a real engine,
# which needs root and Debian's docker.io, so here its two shapes stand in for it.
@pytest.mark.parametrize(
    ("config", "gateway"),
    [
        ([{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}], "172.17.0.1"),
        # An engine that created docker0 itself records no gateway; docker0 gets the first address.
        ([{"Subnet": "172.18.0.0/16"}], "172.18.0.1"),
        ([{"Subnet": "fd00::/64"}, {"Subnet": "10.9.0.0/24"}], "10.9.0.1"),
    ],
)
def test_bridge_gateway_with_and_without_a_recorded_gateway(monkeypatch, config, gateway):
    monkeypatch.setattr(docker, "docker", lambda *args, **kwargs: json.dumps(config) + "\n")
    assert docker.bridge_gateway() == gateway


def test_bridge_without_an_ipv4_subnet_is_a_docker_error(monkeypatch):
    monkeypatch.setattr(docker, "docker", lambda *args, **kwargs: "null\n")
    with pytest.raises(docker.DockerError, match="no IPv4 subnet"):
        docker.bridge_gateway()


@pytest.mark.parametrize(
    ("machine", "arch", "emulated"),
    [
        ("x86_64", "x86_64", False),
        ("x86_64", "arm64", True),
        ("aarch64", "arm64", False),
        ("aarch64", "x86_64", True),
    ],
)
def test_only_an_emulated_architecture_gets_the_longer_timeouts(monkeypatch, machine, arch, emulated):
    monkeypatch.setattr("platform.machine", lambda: machine)
    if emulated:
        assert _timeouts(arch) == {"InferenceTimeout": str(EMULATED_INVOKE_TIMEOUT_S)}
        assert _connection_timeout(arch) == {CONNECTION_TIMEOUT_VARIABLE: str(EMULATED_CONNECTION_TIMEOUT_S)}
    else:
        assert _timeouts(arch) == {} and _connection_timeout(arch) == {}
