"""Start, inspect and approve agent runs through Lambda's durable execution API (:class:`AgentRuns`).

    run = runs.start("order-1234-review", {"task": "...", "documents": [...], "approval": {...}})
    runs.get(run["id"]); runs.decide(run["id"], approved=True, approver="alice", reason="ok")

A run's id is its ``DurableExecutionName``, derived from the idempotency key. Its execution ARN is kept in
S3 (:class:`RunRecords`), so a run outlives a redeploy (docs/redeploys.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from botocore.exceptions import ClientError

from snapllm.agent.errors import AgentError, AgentInputError, failure_code
from snapllm.agent.operations import is_approval_callback
from snapllm.agent.request import AgentRequest
from snapllm.errors import RequestError

MAX_IDEMPOTENCY_KEY_CHARS = 256
_RUN_ID = re.compile(r"run-[0-9a-f]{40}")
_CLOSED_CALLBACK_EVENTS = {"CallbackSucceeded", "CallbackFailed", "CallbackTimedOut"}


class RunError(AgentError, RequestError):
    """A request about a run that cannot be served; ``status_code`` is the HTTP status to answer."""

    status_code = 400
    code = "invalid_request"


class InvalidRunRequestError(RunError):
    """The start request or the approval body is malformed."""


class RunNotFoundError(RunError):
    status_code = 404
    code = "run_not_found"


class IdempotencyConflictError(RunError):
    """The idempotency key already started a run with a different request."""

    status_code = 409
    code = "idempotency_conflict"


class RunNotWaitingError(RunError):
    """The run is not (or not yet, or no longer) waiting for an approval."""

    status_code = 409
    code = "run_not_waiting_for_approval"


class ApprovalAlreadyRecordedError(RunError):
    """The run's approval was already answered (or timed out)."""

    status_code = 409
    code = "approval_already_recorded"


def run_id_for(idempotency_key: str) -> str:
    """The execution name for a key: ``run-`` and 40 hex digits of its SHA-256 (1-64 of [A-Za-z0-9_-]).

    Hashing accepts any key the client likes and keeps names the same length and free of PII.
    """
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidRunRequestError(
            f"the Idempotency-Key header must hold 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        )
    return "run-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class RunRecordError(RunError):
    """The run's record could not be read or written (S3 failed): the request may be retried."""

    status_code = 503
    code = "run_store_unavailable"


class RunRecords:
    """Each run's execution ARN and request digest, kept at ``s3://{bucket}/{prefix}runs/executions/``."""

    def __init__(self, s3_client: Any, *, bucket: str, prefix: str) -> None:
        self._s3 = s3_client
        self.bucket = bucket
        self.prefix = f"{prefix}runs/executions/"

    def get(self, run_id: str) -> dict[str, str] | None:
        """The run's record, or None when no run has this id."""
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self._key(run_id))["Body"].read()
        except ClientError as exc:
            if _error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise RunRecordError(f"cannot read the record of run {run_id}: {_error_code(exc)}") from exc
        record = json.loads(body)
        return {
            "execution_arn": str(record["execution_arn"]),
            "request_sha256": str(record["request_sha256"]),
        }

    def put(self, run_id: str, *, execution_arn: str, request_sha256: str) -> None:
        body = json.dumps({"execution_arn": execution_arn, "request_sha256": request_sha256}).encode()
        try:
            self._s3.put_object(
                Bucket=self.bucket, Key=self._key(run_id), Body=body, ContentType="application/json"
            )
        except ClientError as exc:
            raise RunRecordError(f"cannot record run {run_id}: {_error_code(exc)}") from exc

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}{run_id}.json"


class AgentRuns:
    """The run service over Lambda's durable execution API (or the local stand-in)."""

    def __init__(
        self, lambda_client: Any, *, function_arn: str, records: RunRecords, max_documents: int = 8
    ) -> None:
        self._lambda = lambda_client
        self.function_arn = function_arn
        self.records = records
        self._max_documents = max_documents

    def start(self, idempotency_key: str, request: Any) -> dict[str, Any]:
        run_id = run_id_for(idempotency_key)
        try:
            AgentRequest.parse(request, max_documents=self._max_documents)
        except AgentInputError as exc:
            raise InvalidRunRequestError(str(exc)) from None
        # Canonical JSON: the same request always has the same bytes, so the same digest.
        payload = json.dumps(request, sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(payload).hexdigest()
        record = self.records.get(run_id)
        if record is None:
            try:
                response = self._lambda.invoke(
                    FunctionName=self.function_arn,
                    InvocationType="Event",
                    DurableExecutionName=run_id,
                    Payload=payload,
                )
            except ClientError as exc:
                if _error_code(exc) == "DurableExecutionAlreadyStartedException":
                    raise IdempotencyConflictError(
                        "this Idempotency-Key already started a run with a different request"
                    ) from exc
                raise
            record = {"execution_arn": str(response["DurableExecutionArn"]), "request_sha256": digest}
            self.records.put(run_id, **record)
        elif record["request_sha256"] != digest:
            raise IdempotencyConflictError(
                "this Idempotency-Key already started a run with a different request"
            )
        return {"id": run_id, "execution_arn": record["execution_arn"], "status": "RUNNING"}

    def get(self, run_id: str) -> dict[str, Any]:
        arn = self._arn(run_id)
        execution = self._lambda.get_durable_execution(DurableExecutionArn=arn)
        approval = self._approval(arn)
        result = execution.get("Result")
        error = execution.get("Error")
        return {
            "id": run_id,
            "status": execution["Status"],
            "waiting_for_approval": approval["state"] == "waiting",
            "approval": approval["state"],
            "result": json.loads(result) if result else None,
            "error": {"type": failure_code(error.get("ErrorType")), "message": error.get("ErrorMessage")}
            if error
            else None,
        }

    def decide(self, run_id: str, *, approved: bool, approver: str, reason: str = "") -> dict[str, Any]:
        arn = self._arn(run_id)
        approval = self._approval(arn)
        if approval["state"] == "decided":
            raise ApprovalAlreadyRecordedError(f"run {run_id} already has its approval answer")
        if approval["state"] != "waiting":
            raise RunNotWaitingError(f"run {run_id} is not waiting for approval")
        answer = {"approved": approved, "approver": approver, "reason": reason}
        try:
            self._lambda.send_durable_execution_callback_success(
                CallbackId=approval["callback_id"], Result=json.dumps(answer).encode()
            )
        except ClientError as exc:
            # Two approvals racing: the history said "open", the service already closed the callback.
            if _error_code(exc) == "CallbackTimeoutException":
                raise ApprovalAlreadyRecordedError(f"run {run_id} already has its approval answer") from exc
            raise
        return {"id": run_id, "approval": "approved" if approved else "rejected"}

    def _arn(self, run_id: str) -> str:
        """The execution ARN kept with the run: it names the version the run started on."""
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise RunNotFoundError(f"no run {run_id!r}")
        record = self.records.get(run_id)
        if record is None:
            raise RunNotFoundError(f"no run {run_id!r}")
        return record["execution_arn"]

    def _approval(self, arn: str) -> dict[str, Any]:
        """``none`` (no approval asked yet / not required), ``waiting`` or ``decided``, from the history."""
        callback_id = None
        closed: set[str] = set()
        ended = False
        kwargs: dict[str, Any] = {"DurableExecutionArn": arn}
        while True:
            page = self._lambda.get_durable_execution_history(**kwargs)
            for event in page.get("Events", []):
                kind = event.get("EventType")
                # The latest approval asked for: a gated tool call's, or the run's own.
                if kind == "CallbackStarted" and is_approval_callback(event.get("Name")):
                    callback_id = event["CallbackStartedDetails"]["CallbackId"]
                    operation_id = event.get("Id")
                elif kind in _CLOSED_CALLBACK_EVENTS:
                    closed.add(str(event.get("Id")))
                elif kind and kind.startswith("Execution") and kind != "ExecutionStarted":
                    ended = True
            if not page.get("NextMarker"):
                break
            kwargs["Marker"] = page["NextMarker"]
        if callback_id is None:
            return {"state": "none", "callback_id": None}
        if str(operation_id) in closed:
            return {"state": "decided", "callback_id": callback_id}
        return {"state": "none" if ended else "waiting", "callback_id": callback_id}
