"""A local stand-in for the five Lambda durable-execution calls :class:`~snapllm.agent.runs.AgentRuns` makes.

It answers with the service's response shapes from the SDK's in-process testing runner, so the run service
and the HTTP routes run unchanged against real durable executions of the agent::

    lambda_client = LocalDurableLambda(runner, function_arn="arn:aws:lambda:...:function:agent:live")
    runs = AgentRuns(lambda_client, function_arn=lambda_client.function_arn)

The testing runner does not deduplicate executions by name; this stand-in implements the documented rule
of ``Invoke`` with ``DurableExecutionName``: the same name and payload return the existing execution, the
same name with another payload raises ``DurableExecutionAlreadyStartedException``.
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
    ``get_durable_execution_history`` / ``send_durable_execution_callback_success`` over a test runner."""

    def __init__(self, runner: Any, *, function_arn: str) -> None:
        self.runner = runner  # the testing runner that holds the executions
        self.function_arn = function_arn
        self._started: dict[str, tuple[str, bytes]] = {}  # name -> (execution ARN, payload)
        self._lock = threading.Lock()

    def invoke(
        self, *, FunctionName: str, InvocationType: str, DurableExecutionName: str, Payload: bytes
    ) -> dict[str, Any]:
        if FunctionName != self.function_arn or InvocationType != "Event":
            raise _client_error(
                "InvalidParameterValueException", "start runs asynchronously on the alias", "Invoke"
            )
        with self._lock:
            if DurableExecutionName in self._started:
                arn, payload = self._started[DurableExecutionName]
                if payload != Payload:
                    raise _client_error(
                        "DurableExecutionAlreadyStartedException",
                        f"a durable execution named {DurableExecutionName} already exists",
                        "Invoke",
                    )
            else:
                arn = self.runner.run_async(
                    input=Payload.decode(), execution_name=DurableExecutionName, execution_timeout=600
                )
                self._started[DurableExecutionName] = (arn, Payload)
        return {"StatusCode": 202, "DurableExecutionArn": arn}

    def list_durable_executions_by_function(
        self, *, FunctionName: str, DurableExecutionName: str, Qualifier: str | None = None
    ) -> dict[str, Any]:
        started = self._started.get(DurableExecutionName)
        if started is None:
            return {"DurableExecutions": []}
        return {
            "DurableExecutions": [
                {"DurableExecutionArn": started[0], "DurableExecutionName": DurableExecutionName}
            ]
        }

    def get_durable_execution(self, *, DurableExecutionArn: str) -> dict[str, Any]:
        # The runner exposes execution details only on its executor (what its web server answers with).
        return self.runner._executor.get_execution_details(DurableExecutionArn).to_dict()

    def get_durable_execution_history(
        self, *, DurableExecutionArn: str, Marker: str | None = None
    ) -> dict[str, Any]:
        return self.runner.get_execution_history(DurableExecutionArn).to_dict()

    def send_durable_execution_callback_success(self, *, CallbackId: str, Result: bytes) -> dict[str, Any]:
        try:
            self.runner.send_callback_success(CallbackId, Result)
        except (CallbackTimeoutException, ResourceNotFoundException) as exc:
            # The service's error codes are these exceptions' names.
            operation = "SendDurableExecutionCallbackSuccess"
            raise _client_error(type(exc).__name__, str(exc), operation) from exc
        return {}
