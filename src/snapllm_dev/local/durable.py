"""Run durable functions locally: a real durable execution in this process, the real model, the local S3.

    with LocalAgent.start(sam.load(Path("template.yaml"))) as agent:
        agent.upload_documents(Path("events/agent/documents"))
        run = agent.run(event, decide=approve("alice"))   # decide: the approval's answer, or None

docs/testing.md ("The local stack") says what plays the durable service and what the handler gets.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python_testing.exceptions import DurableFunctionsTestError
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from snapllm.agent import routes as agent_routes
from snapllm.agent.artifacts import ArtifactStore
from snapllm.agent.budget import run_id_from_arn
from snapllm.agent.errors import AgentError
from snapllm.agent.flow import AgentDependencies
from snapllm.agent.handler import build_handler, tool_sources
from snapllm.agent.operations import is_approval_callback, review_document
from snapllm.agent.report import OperationReport
from snapllm.agent.runs import AgentRuns, RunRecords
from snapllm.agent.settings import AgentSettings
from snapllm.agent.tools import ToolSource
from snapllm.inference.client import InferenceClient
from snapllm_dev.local.durable_service import LocalDurableLambda
from snapllm_dev.local.environment import function_environment
from snapllm_dev.local.inference import LocalInferenceClient
from snapllm_dev.local.kinds import Kind, model_function, one_of_kind
from snapllm_dev.local.s3 import LocalS3
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment
from snapllm_dev.sam import Function, Template

# The agent alias local runs answer to, where a deployment would name AgentFunction's `live` alias.
LOCAL_AGENT_ARN = "arn:aws:lambda:us-east-1:123456789012:function:snapllm-AgentFunction:live"

Decision = dict[str, Any]
Decider = Callable[[dict[str, Any]], Decision | None]


def approve(approver: str = "local-user", reason: str = "approved locally") -> Decider:
    return lambda _review: {"approved": True, "approver": approver, "reason": reason}


def reject(approver: str = "local-user", reason: str = "rejected locally") -> Decider:
    return lambda _review: {"approved": False, "approver": approver, "reason": reason}


def no_answer() -> Decider:
    return lambda _review: None


class LocalAgentError(AgentError):
    """The local run could not be driven (no approval request appeared, the run did not finish)."""


@dataclass
class LocalRun:
    """One finished local execution."""

    execution_arn: str
    status: str
    output: Any
    error: dict[str, Any] | None
    report: OperationReport
    test_result: Any
    duration_s: float


def agent_settings(template: Template, function: Function | None = None, **overrides: str) -> AgentSettings:
    """A durable function's settings (default: the template's first) with local values for what only a
    deployment resolves: the artifacts bucket is the local one; the inference alias is wired as a client.
    """
    function = function or one_of_kind(template, Kind.DURABLE)
    env = function_environment(
        function,
        local={"SNAPLLM_AGENT_ARTIFACTS_BUCKET": LOCAL_MODEL_BUCKET},
        overrides=overrides,
        wired=("SNAPLLM_AGENT_INFERENCE_FUNCTION",),
    )
    return AgentSettings.from_env(env)


MCP_SERVERS_VARIABLE = "SNAPLLM_AGENT_MCP_SERVERS"


def with_mcp_servers(overrides: dict[str, str], pairs: Sequence[str]) -> dict[str, str]:
    """``overrides`` with the MCP servers of ``--mcp NAME=URL`` flags added to ``SNAPLLM_AGENT_MCP_SERVERS``
    (unauthenticated; a server that needs more is configured in that variable, with ``--env``)."""
    if not pairs:
        return overrides
    servers = json.loads(overrides.get(MCP_SERVERS_VARIABLE) or "[]")
    for pair in pairs:
        name, _, url = pair.partition("=")
        if not name or not url:
            raise ValueError(f"--mcp takes NAME=URL, got {pair!r}")
        servers.append({"name": name, "url": url})
    return {**overrides, MCP_SERVERS_VARIABLE: json.dumps(servers)}


def upload_documents(s3: LocalS3, settings: AgentSettings, directory: Path) -> list[str]:
    """Upload every file in ``directory``, if any, under the agent's ``{prefix}documents/`` on ``s3``, where
    an event names them (``s3://snapllm-models-local/agent/documents/<file>``); returns their URIs."""
    client = s3.client()
    uris = []
    files = sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    for path in files:
        key = f"{settings.artifacts_prefix}documents/{path.name}"
        client.upload_file(str(path), settings.artifacts_bucket, key)
        uris.append(f"s3://{settings.artifacts_bucket}/{key}")
    return uris


@dataclass
class LocalAgent:
    """The local S3 endpoint, a restored inference environment and the agent's settings."""

    deployment: LocalDeployment
    settings: AgentSettings
    inference: InferenceClient

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        template: Template,
        function: Function | None = None,
        *,
        model_path: Path | None = None,
        inference_timeout_s: float | None = None,
    ) -> Iterator[LocalAgent]:
        """The durable ``function`` (default: the template's first) and the model function it calls."""
        function = function or one_of_kind(template, Kind.DURABLE)
        settings = agent_settings(template, function)
        inference = model_function(template, callers=[function])
        # One generation thread: on a small, shared machine ggml's spinning threads otherwise starve.
        threads = os.environ.get("SNAPLLM_THREADS", "1")
        with (
            LocalDeployment.start(template, model_path=model_path) as deployment,
            deployment.function(
                inference.name, timeout_s=inference_timeout_s, SNAPLLM_THREADS=threads
            ) as model,
        ):
            model.init()
            model.snapshot()
            with model.restore() as environment:
                yield cls(deployment, settings, LocalInferenceClient(environment))

    def upload_documents(self, directory: Path) -> list[str]:
        """Upload every file in ``directory``, if any, under ``{prefix}documents/``; returns their URIs."""
        return upload_documents(self.deployment.s3, self.settings, directory)

    def dependencies(
        self,
        *,
        settings: AgentSettings | None = None,
        inference: InferenceClient | None = None,
        tools: Sequence[ToolSource] | None = None,
    ) -> AgentDependencies:
        settings = settings or self.settings
        return AgentDependencies(
            settings=settings,
            store=ArtifactStore(
                self.deployment.s3.client(),
                bucket=settings.artifacts_bucket,
                prefix=settings.artifacts_prefix,
            ),
            inference=inference or self.inference,
            tools=tuple(tools) if tools is not None else tool_sources(settings),
        )

    @contextlib.contextmanager
    def durable_service(self, *, function_arn: str = LOCAL_AGENT_ARN) -> Iterator[LocalDurableLambda]:
        """The Lambda durable-execution API over this agent, for :class:`~snapllm.agent.runs.AgentRuns`.

        Executions run in this process on the SDK's testing runner until the context exits::

            with agent.durable_service() as service:
                runs = AgentRuns(service, function_arn=service.function_arn, records=agent.run_records())
                runs.start("review-42", {"task": "...", "documents": [...]})
                with agent.version() as runner:   # a redeploy: version 2, the alias moves to it
                    service.publish(runner)
        """
        with self.version() as runner:
            yield LocalDurableLambda(runner, function_arn=function_arn)

    @contextlib.contextmanager
    def version(self) -> Iterator[Any]:
        """A published version of the agent: a testing runner of its own over this agent's handler."""
        deps = self.dependencies()
        with DurableFunctionTestRunner(handler=build_handler(lambda: deps), poll_interval=0.1) as runner:
            yield runner

    def run_records(self) -> RunRecords:
        """Where the run service keeps each run's execution ARN: the agent's prefix on the local S3."""
        return RunRecords(
            self.deployment.s3.client(),
            bucket=self.settings.artifacts_bucket,
            prefix=self.settings.artifacts_prefix,
        )

    def with_settings(self, **changes: Any) -> AgentSettings:
        return AgentSettings(**{**dict(self.settings), **changes})

    def run(
        self,
        event: dict[str, Any],
        *,
        decide: Decider | None = None,
        settings: AgentSettings | None = None,
        inference: InferenceClient | None = None,
        tools: Sequence[ToolSource] | None = None,
        wrap_handler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
        execution_name: str = "local-agent-run",
        timeout_s: int = 600,
    ) -> LocalRun:
        """Run one execution to its end, answering the approval callback with ``decide``."""
        deps = self.dependencies(settings=settings, inference=inference, tools=tools)
        handler = build_handler(lambda: deps)
        if wrap_handler is not None:
            handler = wrap_handler(handler)
        payload = json.dumps(event)
        started = time.perf_counter()
        with DurableFunctionTestRunner(handler=handler, poll_interval=0.1) as runner:
            arn = runner.run_async(input=payload, execution_name=execution_name, execution_timeout=timeout_s)
            self._answer_approvals(runner, arn, deps, decide or approve(), timeout_s)
            result = runner.wait_for_result(arn, timeout=timeout_s)
        duration = time.perf_counter() - started
        output = json.loads(result.result) if result.result else None
        return LocalRun(
            execution_arn=arn,
            status=str(getattr(result.status, "value", result.status)),
            output=output,
            error=result.error.to_dict() if result.error is not None else None,
            report=OperationReport.from_test_result(
                result, input_payload=payload, budget_bytes=deps.settings.state_budget_bytes
            ),
            test_result=result,
            duration_s=duration,
        )

    def _answer_approvals(
        self, runner: Any, arn: str, deps: AgentDependencies, decide: Decider, timeout_s: int
    ) -> None:
        """Answer every approval the run asks for (a gated tool call's, the run's own) until it ends."""
        deadline = time.monotonic() + timeout_s
        answered: set[str] = set()
        while not _has_ended(runner, arn):
            if time.monotonic() > deadline:
                raise LocalAgentError(f"the run did not finish within {timeout_s} s")
            for name in _approvals_asked(runner, arn) - answered:
                try:
                    callback_id = runner.wait_for_callback(arn, name=name, timeout=1)
                except TimeoutError:
                    continue  # asked, but the invocation that asked has not finished yet
                except DurableFunctionsTestError:
                    answered.add(name)  # already closed (timed out)
                    continue
                answered.add(name)
                decision = decide(self._review(deps, arn, name, timeout_s))
                if decision is not None:
                    runner.send_callback_success(callback_id, json.dumps(decision).encode())
            time.sleep(0.1)

    def _review(self, deps: AgentDependencies, arn: str, callback: str, timeout_s: float) -> dict[str, Any]:
        """The review document the run writes right after creating the approval callback ``callback``."""
        key = f"{deps.settings.runs_prefix}{run_id_from_arn(arn)}/{review_document(callback)}"
        client = self.deployment.s3.client()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(client.exceptions.NoSuchKey):
                return json.loads(
                    client.get_object(Bucket=deps.settings.artifacts_bucket, Key=key)["Body"].read()
                )
            time.sleep(0.1)
        raise LocalAgentError(f"the run created its approval callback but never wrote s3://.../{key}")


def _approvals_asked(runner: Any, arn: str) -> set[str]:
    events = runner.get_execution_history(arn).events
    return {
        e.name
        for e in events
        if str(getattr(e.event_type, "value", e.event_type)) == "CallbackStarted"
        and is_approval_callback(e.name)
    }


_END_EVENTS = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionTimedOut", "ExecutionStopped"}


def _has_ended(runner: Any, arn: str) -> bool:
    events = runner.get_execution_history(arn).events
    return any(str(getattr(e.event_type, "value", e.event_type)) in _END_EVENTS for e in events)


@contextlib.contextmanager
def agent_runs(agent: LocalAgent, documents: Path) -> Iterator[None]:
    """Serve the router's ``/v1/agent/runs`` from durable executions of ``agent`` in this process.

    The files in ``documents`` are uploaded first, so an event that names them (``events/agent/review.json``
    names ``events/agent/documents/``) can be posted as it is.
    """
    agent.upload_documents(documents)
    with agent.durable_service() as service:
        runs = AgentRuns(service, function_arn=service.function_arn, records=agent.run_records())
        agent_routes.configure(runs)
        try:
            yield
        finally:
            agent_routes.configure(None)
