"""``snapllm sam-local``: the functions of a ``sam build`` output through the real ``sam local invoke``.

    DOCKER_HOST=unix:///run/snapllm-docker/docker.sock snapllm sam-local --build-dir .aws-sam/build-x86_64

``make sam-local`` starts the Docker engine and the stand-in base image first (scripts/sam-local.sh). This
prints every response and the container's init and invoke times, then checks each function's running
container (:mod:`snapllm_dev.preflight.container`); it exits 1 when an answer or a check is wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from snapllm.errors import SnapllmError
from snapllm_dev.local.report import table
from snapllm_dev.packaged_models import model_path
from snapllm_dev.preflight.container import ContainerTarget, run_container_rules
from snapllm_dev.preflight.template import load_build
from snapllm_dev.samlocal.docker import bridge_gateway, remove_sam_containers, require_engine
from snapllm_dev.samlocal.samcli import Invocation
from snapllm_dev.samlocal.scenario import (
    APPROVAL,
    MODEL_ONLY,
    REJECTION,
    STEPS,
    Outcome,
    container_target,
    probe_container,
    run_agent,
    run_steps,
)
from snapllm_dev.samlocal.stage import SamLocalStage
from snapllm_dev.samlocal.webapp import WebAdapterContainer, remove_web_adapter_containers

HEALTH_EVENT = Path("events/router/health.json")
#: The repository of the Lambda Python base image (or its local stand-in, scripts/lambda-base-image.sh).
BASE_IMAGE = "public.ecr.aws/lambda/python"
#: How much of a failed invoke's stderr (SAM's messages and the function's log) the report shows.
STDERR_TAIL_LINES = 40


def run(args: argparse.Namespace) -> int:
    # Each response is printed as it comes: a run takes minutes, and its output usually goes to a log.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    try:
        if not args.build_dir.is_dir():
            raise SnapllmError(f"--build-dir: no folder {str(args.build_dir)!r} (run `make build` first)")
        require_engine()
    except SnapllmError as exc:
        print(f"snapllm sam-local: {exc}", file=sys.stderr)
        return 2
    try:
        remove_sam_containers()
        host = bridge_gateway()
        with SamLocalStage.start(
            args.build_dir,
            sam_cli=args.sam,
            host=host,
            logs=args.logs,
            arch=args.arch,
            model_path=model_path(args.model) if args.model else None,
            # The warm-up serves the router's and the agent's calls; a model-only run has none.
            warm_up=not args.model_only,
        ) as stage:
            outcomes = run_steps(stage, MODEL_ONLY if args.model_only else STEPS)
            for outcome in outcomes:
                _print_outcome(stage, outcome)
            if args.model_only:
                return 1 if _summary(outcomes) else 0
            probes = {stage.roles.model.name: probe_container(stage.roles.model.name)}
            # The router ran in containers that `sam local invoke` removed: one more (health) request through
            # start-lambda leaves a warm one to look inside.
            stage.invoke_warm(stage.roles.router.name, HEALTH_EVENT)
            probes[stage.roles.router.name] = probe_container(stage.roles.router.name)
            approved, agent_probe = run_agent(stage, APPROVAL, probe=True)
            rejected, _ = run_agent(stage, REJECTION)
            for outcome in (approved, rejected):
                _print_outcome(stage, outcome)
                outcomes.append(outcome)
            if agent_probe is not None:
                probes[stage.roles.agent.name] = agent_probe
            web_adapter_failed = _web_adapter_function(stage, args)
            for name, probe in probes.items():
                (args.logs / f"probe-{name}.json").write_text(json.dumps(probe, indent=1))
            targets = [container_target(stage, name, probe) for name, probe in probes.items()]
    except (SnapllmError, OSError) as exc:
        print(f"snapllm sam-local: {exc}", file=sys.stderr)
        return 2
    finally:
        # Best effort: a failure here must not hide the run's own error.
        for remove in (remove_sam_containers, remove_web_adapter_containers):
            with contextlib.suppress(SnapllmError):
                remove()
    failed = _summary(outcomes) or web_adapter_failed
    return 1 if _container_report(targets) or failed else 0


def _web_adapter_function(stage: SamLocalStage, args: argparse.Namespace) -> bool:
    """The web-adapter function in its container, driven as its adapter would; True if it misbehaved."""
    function = stage.roles.web_adapter
    if function is None:
        return False
    print(f"\n{function.name}: in a container without Lambda Web Adapter (sam local cannot fetch its layer)")
    build = load_build(args.build_dir, {"Architecture": args.arch})
    image = f"{BASE_IMAGE}:3.13-{args.arch}"
    with WebAdapterContainer.start(
        build, function.name, image=image, variables=stage.web_adapter_variables
    ) as container:
        report = container.drive()
    (args.logs / f"web-adapter-{function.name}.json").write_text(json.dumps(report, indent=1))
    problems = web_adapter_problems(report)
    stream = report.get("stream") or {}
    print(json.dumps({k: v for k, v in report.items() if k != "log_tail"}, indent=2))
    if problems:
        print(f"-> WRONG: {'; '.join(problems)}\n{report.get('log_tail', '')}")
        return True
    print(
        f"-> as expected; ready in {report['readiness']['seconds']:.1f} s (module init), warm-up hook "
        f"{report['before_checkpoint']['seconds'] * 1000:.0f} ms, first event "
        f"{stream['first_event_seconds'] * 1000:.0f} ms, {stream['chunks']} chunks"
    )
    return False


def web_adapter_problems(report: dict[str, Any]) -> list[str]:
    """What the driver's report shows wrong: the app must get ready, answer both SnapStart hooks, stream a
    completion to its end and refuse a bad request with a 400."""
    problems = []
    if (report.get("readiness") or {}).get("status") != 200:
        return ["the app never answered its readiness check (see its log below)"]
    for hook in ("before_checkpoint", "after_restore"):
        if (report.get(hook) or {}).get("status") != 200:
            problems.append(f"the {hook} hook answered {(report.get(hook) or {}).get('status')}")
    stream = report.get("stream") or {}
    if (
        stream.get("status") != 200
        or not stream.get("done")
        or not stream.get("chunks")
        or not stream.get("text")
    ):
        problems.append(f"the streamed completion did not stream text to [DONE]: {stream}")
    if (report.get("refused") or {}).get("status") != 400:
        problems.append(f"the bad request got {report.get('refused')} instead of a 400")
    return problems


def _print_outcome(stage: SamLocalStage, outcome: Outcome) -> None:
    call = outcome.invocation
    command = shlex.join(stage.sam.invoke_command(call.function, call.event))
    print(f"\n$ {command}")
    print(json.dumps(call.response, indent=2)[:6000])
    if outcome.problem is None:
        print(f"-> as expected; {_times(call)}")
        return
    print(f"-> WRONG: {outcome.problem}; {_times(call)}")
    # What SAM and the function printed says why: the container is gone by now.
    print(f"sam local invoke's stderr, its last {STDERR_TAIL_LINES} lines:")
    print("\n".join(call.stderr.splitlines()[-STDERR_TAIL_LINES:]))


def _times(call: Invocation) -> str:
    report = call.report
    parts = []
    if report.init_phases_s and "init" in report.init_phases_s:
        phases = report.init_phases_s
        parts.append(
            f"init {phases['init'] * 1000:.0f} ms (S3 -> memfd {phases.get('s3_to_memfd', 0) * 1000:.0f} ms, "
            f"load {phases.get('model_load', 0) * 1000:.0f} ms)"
        )
    if report.duration_ms is not None:
        parts.append(f"container {report.duration_ms:.0f} ms (init + invoke)")
    parts.append(f"sam local invoke {call.wall_s:.1f} s")
    return ", ".join(parts)


def _summary(outcomes: list[Outcome]) -> bool:
    rows = [
        (
            f"{o.invocation.function} {o.invocation.event.name}",
            ("ok" if o.problem is None else "WRONG") + f"  {_times(o.invocation)}",
        )
        for o in outcomes
    ]
    print("\n" + table(rows, title="sam local invoke"))
    return any(o.problem is not None for o in outcomes)


def _container_report(targets: list[ContainerTarget]) -> bool:
    findings = run_container_rules(targets)
    print("\ncontainers (inside each function's running container)")
    for target in targets:
        view = target.view
        llama = view.modules.get("llama_cpp")
        where = f"; llama_cpp from {llama.origin}" if llama and llama.origin else ""
        print(f"  {view.function}: handler {view.handler}{where}")
    for finding in findings:
        print(f"  {finding}")
    errors = [f for f in findings if f.severity == "error"]
    print(f"  {len(errors)} errors, {len(findings) - len(errors)} notes")
    return bool(errors)
