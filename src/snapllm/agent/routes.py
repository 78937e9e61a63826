"""HTTP routes of the agent (start a run, its status, its approval), as a Powertools router that the
OpenAI router mounts next to its own: ``RouterApp.from_env(routers=[agent_routes.router])``.

The runs service comes from the environment (docs/configuration.md) unless :func:`configure` set one.
Errors are :class:`~snapllm.agent.runs.RunError` request errors, rendered like the router's own;
docs/agents.md lists the routes and their statuses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import boto3
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field

from snapllm.agent.request import AgentRequest
from snapllm.agent.runs import MAX_IDEMPOTENCY_KEY_CHARS, AgentRuns, RunRecords
from snapllm.agent.settings import AgentRoutesEnvironment
from snapllm.errors import ConfigurationError
from snapllm.protocol.http.openapi import BODY_ERRORS, error_doc
from snapllm.protocol.requests import RequestBody

router = APIGatewayHttpRouter()
_service: AgentRuns | None = None

TAGS = ["Agent"]


class RunStarted(BaseModel):
    id: str
    execution_arn: str | None
    status: Literal["RUNNING"]


class RunFailure(BaseModel):
    """Why a run failed. ``type`` is a stable code (``document_not_found``, ``invalid_input``,
    ``model_rejected_request``, ``state_budget_exceeded``, ``artifact_store_error``, ``agent_failed``...)."""

    type: str
    message: str | None


class RunStatus(BaseModel):
    """A run as the durable execution reports it; ``approval`` is read from the execution's history."""

    id: str
    status: Literal["RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "STOPPED"]
    waiting_for_approval: bool
    approval: Literal["none", "waiting", "decided"]
    result: Any = None
    error: RunFailure | None = None


class ApprovalDecision(RequestBody):
    # Strict, as every request model: an approval is a JSON boolean, never a string such as "yes".
    approved: bool
    approver: str = Field(default="api", min_length=1, max_length=100)
    reason: str = Field(default="", max_length=500)


class ApprovalRecorded(BaseModel):
    id: str
    approval: Literal["approved", "rejected"]


def _responses(
    status: int, model: type[BaseModel], description: str, errors: dict[int, str], *, body: bool = False
) -> dict[int, dict[str, Any]]:
    """The OpenAPI answers of a route: its success, its errors (with a JSON ``body``, the body's own), and
    the router's own failure."""
    documented = {status: {"description": description, "content": {"application/json": {"model": model}}}}
    for code, meaning in {**errors, 500: "Unexpected router failure."}.items():
        documented[code] = error_doc(meaning)
    return {**documented, **(BODY_ERRORS if body else {})}


IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY_CHARS,
        description="The client's key for this run: the same key never starts a second run.",
    ),
]


def configure(service: AgentRuns | None) -> None:
    """Use ``service`` for the routes (tests, ``snapllm local serve``); ``None`` returns to the default."""
    global _service
    _service = service


def _runs() -> AgentRuns:
    global _service
    if _service is None:
        env = AgentRoutesEnvironment.from_env()
        if env.function_arn is None or env.artifacts_bucket is None:
            raise ConfigurationError(
                "SNAPLLM_AGENT_FUNCTION_ARN (the agent alias) and SNAPLLM_AGENT_ARTIFACTS_BUCKET (where "
                "runs are recorded) must be set to serve /v1/agent"
            )
        records = RunRecords(boto3.client("s3"), bucket=env.artifacts_bucket, prefix=env.artifacts_prefix)
        _service = AgentRuns(boto3.client("lambda"), function_arn=env.function_arn, records=records)
    return _service


def _json(status: int, body: dict[str, Any]) -> Response[dict[str, Any]]:
    # The resolver serializes the dict; a pre-serialized string would fail its response validation.
    return Response(status_code=status, content_type="application/json", body=body)


@router.post(
    "/v1/agent/runs",
    summary="Start an agent run",
    tags=TAGS,
    responses=_responses(
        202,
        RunStarted,
        "The run (started now, or earlier with this key and this request).",
        {
            400: "Invalid request or Idempotency-Key.",
            409: "This Idempotency-Key already started a run with a different request.",
        },
        body=True,
    ),
)
def start_run(request: AgentRequest, idempotency_key: IdempotencyKey) -> Response[dict[str, Any]]:
    # The body as sent (not the parsed model): the service compares it to tell a retry from a reuse.
    return _json(202, _runs().start(idempotency_key, router.current_event.json_body))


@router.get(
    "/v1/agent/runs/<run_id>",
    summary="Read an agent run",
    tags=TAGS,
    responses=_responses(
        200, RunStatus, "The run's status, approval state, and result.", {404: "No run with this id."}
    ),
)
def get_run(run_id: str) -> Response[dict[str, Any]]:
    return _json(200, _runs().get(run_id))


@router.post(
    "/v1/agent/runs/<run_id>/approval",
    summary="Approve or reject a waiting agent run",
    tags=TAGS,
    responses=_responses(
        200,
        ApprovalRecorded,
        "The answer was delivered to the waiting run.",
        {
            400: "Invalid decision.",
            404: "No run with this id.",
            409: "The run is not waiting for approval, or already has its answer.",
        },
        body=True,
    ),
)
def answer_approval(run_id: str, decision: ApprovalDecision) -> Response[dict[str, Any]]:
    answer = _runs().decide(
        run_id, approved=decision.approved, approver=decision.approver, reason=decision.reason
    )
    return _json(200, answer)
