"""What `make sam-local` runs through the real `sam local invoke`, and what each answer must be.

Each :class:`Step` is one ``sam local invoke`` of a function with an event from ``events/``, and an
expectation: a pure function of the response that returns what is wrong with it, or None. The agent runs
twice, through the durable emulator: once approved and once rejected, both answered with ``sam local
callback succeed`` while ``sam local invoke`` waits, as a person would answer from another terminal.
While the agent waits, and after the others ran in ``start-lambda``'s warm containers, the container probe
(:mod:`snapllm_dev.preflight.probe`) looks inside each function's container.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from snapllm.errors import SnapllmError
from snapllm_dev.preflight.container import ContainerTarget, ContainerView
from snapllm_dev.samlocal.docker import exec_python, sam_containers
from snapllm_dev.samlocal.samcli import Invocation, RunningInvoke, SamCli
from snapllm_dev.samlocal.stage import SamLocalStage
from snapllm_dev.settings_doc import declared_variables

PROBE = Path(__file__).resolve().parent.parent / "preflight" / "probe.py"

Expectation = Callable[[Any], "str | None"]


def completion(response: Any) -> str | None:
    """A direct-invoke completion with text."""
    try:
        text = response["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return "no choices[0].message.content"
    return None if text else "empty completion"


def completion_text(response: Any) -> str | None:
    """A direct-invoke text completion with text."""
    try:
        text = response["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return "no choices[0].text"
    return None if text else "empty completion"


def refused(status: int, param: str | None = None) -> Expectation:
    """A direct-invoke error answer with ``status`` (naming ``param``)."""

    def check(response: Any) -> str | None:
        if not isinstance(response, dict) or response.get("statusCode") != status:
            return f"expected statusCode {status}"
        if param is not None and (response.get("error") or {}).get("param") != param:
            return f"expected the error to name {param!r}"
        return None

    return check


def http(status: int, body: Callable[[Any], str | None] | None = None) -> Expectation:
    """An API Gateway response with ``status`` whose JSON body passes ``body``."""

    def check(response: Any) -> str | None:
        if not isinstance(response, dict) or response.get("statusCode") != status:
            got = response.get("statusCode") if isinstance(response, dict) else response
            return f"expected HTTP {status}, got {got}"
        if body is None:
            return None
        try:
            return body(json.loads(response.get("body") or "null"))
        except ValueError:
            return "the body is not JSON"

    return check


def models_listed(body: Any) -> str | None:
    return None if isinstance(body, dict) and body.get("data") else "no models listed"


def run_finished(approved: bool) -> Expectation:
    """A durable agent run that finished, approved (with an answer) or not (cancelled, with the reason)."""

    def check(response: Any) -> str | None:
        if not isinstance(response, dict) or response.get("Status") != "SUCCEEDED":
            return f"the run did not succeed: {response}"
        result = response.get("Result") or {}
        approval = result.get("approval") or {}
        if approval.get("approved") is not approved:
            return f"expected approval.approved {approved}, got {approval.get('approved')}"
        if approved and not result.get("answer"):
            return "an approved run has no answer"
        return None

    return check


@dataclass(frozen=True)
class Step:
    """One ``sam local invoke``: the function's role in the stack, the event, what the answer must be."""

    role: str
    event: Path
    expect: Expectation


STEPS: tuple[Step, ...] = (
    Step("model", Path("events/inference/chat.json"), completion),
    Step("model", Path("events/inference/invalid-temperature.json"), refused(400, "temperature")),
    Step("router", Path("events/router/chat.json"), http(200, lambda body: completion(body))),
    Step("router", Path("events/router/models.json"), http(200, models_listed)),
    Step("router", Path("events/router/unsupported-n.json"), http(400)),
    Step("router", Path("events/router/unknown-model.json"), http(404)),
)
#: One short completion: what an emulated architecture can afford.
MODEL_ONLY: tuple[Step, ...] = (Step("model", Path("events/inference/completion.json"), completion_text),)
AGENT_EVENT = Path("events/agent/review.json")
APPROVAL = {"approved": True, "approver": "sam local callback", "reason": "approved in make sam-local"}
REJECTION = {"approved": False, "approver": "sam local callback", "reason": "rejected in make sam-local"}


@dataclass(frozen=True)
class Outcome:
    """A step's invocation and what is wrong with its answer (None: as expected)."""

    invocation: Invocation
    problem: str | None


class ScenarioError(SnapllmError):
    """A durable run could not be answered (no execution ARN, no callback)."""


def run_steps(stage: SamLocalStage, steps: tuple[Step, ...] = STEPS) -> list[Outcome]:
    roles = {"model": stage.roles.model.name, "router": stage.roles.router.name}
    outcomes = []
    for step in steps:
        invocation = stage.sam.invoke(roles[step.role], step.event)
        outcomes.append(Outcome(invocation, step.expect(invocation.response)))
    return outcomes


def run_agent(
    stage: SamLocalStage, decision: Mapping[str, Any], *, probe: bool = False, timeout_s: float = 600
) -> tuple[Outcome, dict[str, Any] | None]:
    """One durable run of the agent, its approval answered with ``decision``; with ``probe``, the container
    probe runs while the run waits (the agent's container is up then)."""
    function = stage.roles.agent.name
    running = stage.sam.start_invoke(function, AGENT_EVENT)
    view = None
    try:
        arn, callback_id = _await_callback(stage.sam, running, timeout_s=timeout_s)
        if probe:
            view = probe_container(function)
        stage.sam.callback_succeed(callback_id, decision)
    except BaseException:
        running.stop()
        raise
    invocation = running.finish(timeout_s=timeout_s)
    # In a terminal, SAM prints a durable run's summary as text; the run itself is read as JSON.
    details = stage.sam.execution_get(arn)
    result = {
        "Status": details.get("Status"),
        "Result": json.loads(details["Result"]) if details.get("Result") else None,
        **({"Error": details["Error"]} if details.get("Error") else {}),
    }
    invocation = replace(invocation, response=result)
    return Outcome(invocation, run_finished(bool(decision["approved"]))(result)), view


def _await_callback(sam: SamCli, running: RunningInvoke, *, timeout_s: float) -> tuple[str, str]:
    """The run's execution ARN and its approval callback's id, from ``sam local execution history`` once
    the run waits for it."""
    deadline = time.monotonic() + timeout_s
    arn = None
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise ScenarioError(
                f"sam local invoke ended before the approval: {running.stderr_so_far()[-1500:]}"
            )
        arn = arn or running.execution_arn
        if arn:
            found = _callback_ids(sam.execution_history(arn))
            if found:
                return arn, found[0]
        time.sleep(1)
    raise ScenarioError(f"no approval callback within {timeout_s:g} s (execution {arn or 'not started'})")


def _callback_ids(history: Any) -> list[str]:
    """Every ``CallbackId`` in an execution history, wherever the format nests it."""
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "CallbackId" and isinstance(item, str):
                    found.append(item)
                else:
                    visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(history)
    return found


def probe_container(function: str) -> dict[str, Any]:
    """The probe's view of ``function``'s running container (the newest, if SAM runs several)."""
    containers = sam_containers(function)
    if not containers:
        raise ScenarioError(f"no running container of {function} to look inside")
    return exec_python(containers[0], PROBE)


def container_target(stage: SamLocalStage, function: str, probe: Mapping[str, Any]) -> ContainerTarget:
    """A probe's view with what the template and the code say about the function."""
    spec = stage.template.function(function)
    return ContainerTarget(
        view=ContainerView.from_probe(function, probe),
        declared=declared_variables(function),
        template_variables=frozenset(spec.environment),
        has_layers=bool(spec.layers),
        local_variables=stage.local_only,
    )
