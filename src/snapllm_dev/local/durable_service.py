"""A local stand-in for the Lambda durable-execution calls :class:`~snapllm.agent.runs.AgentRuns` makes.

It answers in the service's shapes from the SDK's testing runner (one per published version), so the run
service runs unchanged against real durable executions (docs/testing.md, "The local stack")::

    lambda_client = LocalDurableLambda(runner, function_arn="arn:aws:lambda:...:function:agent:live")
"""

from __future__ import annotations

import threading
from typing import Any

from aws_durable_execution_sdk_python_testing.exceptions import (
    CallbackTimeoutException,
    ResourceNotFoundException,
)
from botocore.exceptions import ClientError


def _client_error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class LocalDurableLambda:
    """``invoke`` / ``list_durable_executions_by_function`` / ``get_durable_execution`` /
    ``get_durable_execution_history`` / ``send_durable_execution_callback_success`` over test runners, one
    per published version."""

    def __init__(self, runner: Any, *, function_arn: str) -> None:
        self.function_arn = function_arn  # the alias
        parts = function_arn.split(":")
        self.function = ":".join(parts[:7])
        self.alias = parts[7] if len(parts) == 8 else None
        self.versions: dict[str, Any] = {"1": runner}  # version -> the runner holding its executions
        self._started: dict[tuple[str, str], tuple[str, bytes]] = {}  # (version, name) -> (ARN, payload)
        self._executions: dict[str, tuple[Any, str]] = {}  # execution ARN -> (runner, the runner's ARN)
        self._lock = threading.Lock()

    @property
    def runner(self) -> Any:
        """The runner of the version the alias points at."""
        return self.versions[self.current_version]

    @property
    def current_version(self) -> str:
        return max(self.versions, key=int)

    def publish(self, runner: Any) -> str:
        """Publish a new version that runs on ``runner`` and point the alias at it; returns its number."""
        with self._lock:
            version = str(int(self.current_version) + 1)
            self.versions[version] = runner
        return version

    def invoke(
        self, *, FunctionName: str, InvocationType: str, DurableExecutionName: str, Payload: bytes
    ) -> dict[str, Any]:
        if FunctionName != self.function_arn or InvocationType != "Event":
            raise _client_error(
                "InvalidParameterValueException", "start runs asynchronously on the alias", "Invoke"
            )
        with self._lock:
            version = self.current_version
            started = self._started.get((version, DurableExecutionName))
            if started is not None:
                arn, payload = started
                if payload != Payload:
                    raise _client_error(
                        "DurableExecutionAlreadyStartedException",
                        f"a durable execution named {DurableExecutionName} already exists",
                        "Invoke",
                    )
            else:
                runner = self.versions[version]
                inner = runner.run_async(
                    input=Payload.decode(), execution_name=DurableExecutionName, execution_timeout=600
                )
                arn = f"{self.function}:{version}/durable-execution/{DurableExecutionName}/{inner}"
                self._started[(version, DurableExecutionName)] = (arn, Payload)
                self._executions[arn] = (runner, inner)
        return {"StatusCode": 202, "DurableExecutionArn": arn}

    def list_durable_executions_by_function(
        self, *, FunctionName: str, DurableExecutionName: str, Qualifier: str | None = None
    ) -> dict[str, Any]:
        version = self.current_version if Qualifier in (None, self.alias) else Qualifier
        started = self._started.get((version, DurableExecutionName))
        if started is None:
            return {"DurableExecutions": []}
        return {
            "DurableExecutions": [
                {"DurableExecutionArn": started[0], "DurableExecutionName": DurableExecutionName}
            ]
        }

    def get_durable_execution(self, *, DurableExecutionArn: str) -> dict[str, Any]:
        runner, inner = self._execution(DurableExecutionArn, "GetDurableExecution")
        # The runner exposes execution details only on its executor (what its web server answers with).
        details = runner._executor.get_execution_details(inner).to_dict()
        return {**details, "DurableExecutionArn": DurableExecutionArn}

    def get_durable_execution_history(
        self, *, DurableExecutionArn: str, Marker: str | None = None
    ) -> dict[str, Any]:
        runner, inner = self._execution(DurableExecutionArn, "GetDurableExecutionHistory")
        return runner.get_execution_history(inner).to_dict()

    def send_durable_execution_callback_success(self, *, CallbackId: str, Result: bytes) -> dict[str, Any]:
        operation = "SendDurableExecutionCallbackSuccess"
        last: Exception | None = None
        # A callback id belongs to one execution, on one version's runner.
        for runner in list(self.versions.values()):
            try:
                runner.send_callback_success(CallbackId, Result)
                return {}
            except ResourceNotFoundException as exc:
                last = exc
            except CallbackTimeoutException as exc:
                # The service's error codes are these exceptions' names.
                raise _client_error(type(exc).__name__, str(exc), operation) from exc
        raise _client_error("ResourceNotFoundException", str(last), operation)

    def _execution(self, arn: str, operation: str) -> tuple[Any, str]:
        found = self._executions.get(arn)
        if found is None:
            raise _client_error("ResourceNotFoundException", f"no durable execution {arn}", operation)
        return found
