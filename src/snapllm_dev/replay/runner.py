"""Run events through their functions on one local stack, and record what each answered.

    with Replayer.start(template, model_path=None) as replayer:
        outcome = replayer.answer(event)     # what the function answered, as compared and recorded

Each event goes in as a deployed function would receive it: docs/testing.md ("Replay events") says how.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python.execution import DurableExecutionInvocationInput
from aws_durable_execution_sdk_python.lambda_service import OperationType

from snapllm.errors import RequestError
from snapllm.protocol.http.edge import decode_json
from snapllm_dev.local.durable import LocalAgentError, approve, reject
from snapllm_dev.local.gateway import LocalGateway
from snapllm_dev.local.kinds import Kind, kind_of
from snapllm_dev.local.processes import Closing
from snapllm_dev.local.stack import LocalStack
from snapllm_dev.replay.events import Approval, ReplayDeadlineError, ReplayEvent, ReplaySetupError
from snapllm_dev.replay.masks import masks_for, normalize
from snapllm_dev.sam import Function, Template


@dataclass
class Replayer(Closing):
    template: Template
    stack: LocalStack
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    @classmethod
    def start(
        cls, template: Template, events: list[ReplayEvent], *, model_path: Path | None = None
    ) -> Replayer:
        """One stack for ``events``: its router is the HTTP API function they name (default: the first)."""
        functions = {name: _function(template, name) for name in {event.function for event in events}}
        for function in functions.values():
            if kind_of(template, function) is Kind.WEB_ADAPTER:
                raise ReplaySetupError(
                    f"{function.name} runs under Lambda Web Adapter and takes HTTP requests, not events: "
                    "replay the same requests through the router's events"
                )
        routers = [fn for fn in functions.values() if kind_of(template, fn) is Kind.HTTP_API]
        if len(routers) > 1:
            raise ReplaySetupError(
                f"one replay serves one HTTP API function, not {[fn.name for fn in routers]}"
            )
        stack = LocalStack.start(
            template, routers[0] if routers else None, model_path=model_path, streaming=False
        )
        return cls(template, stack)

    def answer(self, event: ReplayEvent) -> Any:
        """What the function answered ``event``, with what varies between runs masked."""
        function = _function(self.template, event.function)
        text = _read(event)
        kind = kind_of(self.template, function)
        if kind is Kind.HTTP_API:
            if function.name != self.stack.router_function.name:
                raise ReplaySetupError(f"{event.name}: this replay serves {self.stack.router_function.name}")
            request, outcome = self._http_api(event, text)
        elif kind is Kind.DURABLE:
            request, outcome = None, self._durable(event, text)
        elif function.name == self.stack.model_function.name:
            request, outcome = _json_or_none(text), self._direct(text)
        else:
            raise ReplaySetupError(
                f"{event.name}: {function.name} is not the model function this stack runs "
                f"({self.stack.model_function.name})"
            )
        return normalize(outcome, masks_for(request))

    def _direct(self, text: str) -> dict[str, Any]:
        result = self.stack.model_environment.invoke_json(text)
        if result.error is not None:
            return {"error": result.error}
        return {"response": result.response}

    def _http_api(self, event: ReplayEvent, text: str) -> tuple[Any, dict[str, Any]]:
        payload = _event_object(event, text)
        response = LocalGateway(self.stack, streaming=False).invoke_router(payload)
        return _http_request_body(payload), {**response, "body": _http_body(response)}

    def _durable(self, event: ReplayEvent, text: str) -> dict[str, Any]:
        if self.stack.agent is None:
            raise ReplaySetupError(f"{event.name}: the template has no durable function the router runs")
        payload = _execution_input(event, _event_object(event, text))
        decide = approve("replay") if event.approval is Approval.APPROVE else reject("replay")
        try:
            run = self.stack.agent.run(payload, decide=decide, execution_name=f"replay-{event.path.stem}")
        except (LocalAgentError, TimeoutError) as exc:
            # The execution outlasted the local run's time: on a slow machine, not a different answer.
            raise ReplayDeadlineError(f"the durable run did not finish in time: {exc}") from None
        return {"status": run.status, "result": run.output, "error": run.error}

    def close(self) -> None:
        self.stack.close()


def _function(template: Template, name: str) -> Function:
    try:
        return template.function(name)
    except KeyError:
        raise ReplaySetupError(
            f"the replay manifest names {name}, which the template does not have"
        ) from None


def _read(event: ReplayEvent) -> str:
    try:
        return event.path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplaySetupError(f"cannot read {event.path}: {exc}") from None


def _json_or_none(text: str) -> Any:
    with contextlib.suppress(RequestError):
        return decode_json(text)
    return None


def _event_object(event: ReplayEvent, text: str) -> dict[str, Any]:
    try:
        payload = decode_json(text)
    except RequestError as exc:
        raise ReplaySetupError(f"{event.name} is not valid JSON: {exc.message}") from None
    if not isinstance(payload, dict):
        raise ReplaySetupError(f"{event.name} must hold a JSON object")
    return payload


def _execution_input(event: ReplayEvent, payload: dict[str, Any]) -> dict[str, Any]:
    """The execution's input: the event itself, or the input payload of a recorded invocation envelope."""
    if "DurableExecutionArn" not in payload:
        return payload
    try:
        envelope = DurableExecutionInvocationInput.from_dict(payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplaySetupError(f"{event.name} is not a durable invocation event: {exc}") from None
    for operation in envelope.initial_execution_state.operations:
        if operation.operation_type is OperationType.EXECUTION and operation.execution_details is not None:
            return _event_object(event, operation.execution_details.input_payload or "")
    raise ReplaySetupError(f"{event.name}: its InitialExecutionState has no EXECUTION operation with input")


def _http_request_body(event: dict[str, Any]) -> Any:
    body = event.get("body")
    if not isinstance(body, str):
        return None
    if event.get("isBase64Encoded"):
        try:
            body = base64.b64decode(body, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
    return _json_or_none(body)


def _http_body(response: dict[str, Any]) -> Any:
    """The response body, decoded where it is JSON, so a difference shows as a field rather than a line."""
    body = response.get("body")
    if not isinstance(body, str) or response.get("isBase64Encoded"):
        return body
    try:
        return json.loads(body)
    except ValueError:
        return body
