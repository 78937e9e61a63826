"""HTTP routes of the agent, as a Powertools router the OpenAI router mounts next to its own routes.

- ``POST /v1/agent/runs`` (header ``Idempotency-Key``, body ``{task, documents, approval}``): 202 and the
  run's id; the same key never starts two runs.
- ``GET /v1/agent/runs/{run_id}``: status, whether it waits for approval, result or error.
- ``POST /v1/agent/runs/{run_id}/approval`` (body ``{"approved": bool, "approver": str, "reason": str}``).

Mounting (``snapllm.router.app``)::

    from snapllm.agent import routes as agent_routes
    router = RouterApp.from_env(routers=[agent_routes.router])

The service comes from ``SNAPLLM_AGENT_FUNCTION_ARN`` (the agent alias) unless :func:`configure` set one.
Errors are OpenAI-style bodies: 400 bad input, 404 unknown run, 409 not waiting / already answered /
idempotency conflict.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from snapllm.agent.runs import AgentRuns, InvalidRunRequestError, RunError
from snapllm.errors import ConfigurationError

router = APIGatewayHttpRouter()
_service: AgentRuns | None = None


def configure(service: AgentRuns | None) -> None:
    """Use ``service`` for the routes (tests, ``snapllm local serve``); ``None`` returns to the default."""
    global _service
    _service = service


def _runs() -> AgentRuns:
    global _service
    if _service is None:
        arn = os.environ.get("SNAPLLM_AGENT_FUNCTION_ARN", "").strip()
        if not arn:
            raise ConfigurationError(
                "SNAPLLM_AGENT_FUNCTION_ARN must name the agent alias to serve /v1/agent"
            )
        import boto3

        _service = AgentRuns(boto3.client("lambda"), function_arn=arn)
    return _service


def _json(status: int, body: dict[str, Any]) -> Response[dict[str, Any]]:
    # The resolver serializes the dict; a pre-serialized string would fail its response validation.
    return Response(status_code=status, content_type="application/json", body=body)


def _error(exc: RunError) -> Response[dict[str, Any]]:
    return _json(exc.status_code, exc.to_body())


def _body() -> Any:
    try:
        return json.loads(router.current_event.body or "null")
    except json.JSONDecodeError:
        raise InvalidRunRequestError("the body must be JSON") from None


@router.post("/v1/agent/runs")
def start_run() -> Response[dict[str, Any]]:
    try:
        key = router.current_event.headers.get("idempotency-key") or router.current_event.headers.get(
            "Idempotency-Key"
        )
        if not key:
            raise InvalidRunRequestError("the Idempotency-Key header is required to start a run")
        return _json(202, _runs().start(key, _body()))
    except RunError as exc:
        return _error(exc)


@router.get("/v1/agent/runs/<run_id>")
def get_run(run_id: str) -> Response[dict[str, Any]]:
    try:
        return _json(200, _runs().get(run_id))
    except RunError as exc:
        return _error(exc)


@router.post("/v1/agent/runs/<run_id>/approval")
def answer_approval(run_id: str) -> Response[dict[str, Any]]:
    try:
        body = _body()
        if not isinstance(body, dict) or not isinstance(body.get("approved"), bool):
            raise InvalidRunRequestError('the body must be {"approved": true|false, "approver", "reason"}')
        answer = _runs().decide(
            run_id,
            approved=body["approved"],
            approver=str(body.get("approver") or "api")[:100],
            reason=str(body.get("reason") or "")[:500],
        )
        return _json(200, answer)
    except RunError as exc:
        return _error(exc)
