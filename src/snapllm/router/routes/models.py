"""What the deployment serves: its models and its liveness, answered by the router itself."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import Router

from snapllm.protocol.completions.objects import Health, ModelCard, ModelList
from snapllm.protocol.http import openapi
from snapllm.protocol.http.routes import HEALTH, MODELS, model_path
from snapllm.router.gateway import Gateway, json_response


def model_list_routes(gateway: Gateway) -> Router:
    router = Router()

    @router.get(
        MODELS,
        summary="List the models this deployment routes to",
        responses=openapi.simple_responses(ModelList),
        tags=["OpenAI"],
    )
    def list_models() -> Response[dict[str, Any]]:
        return json_response(200, gateway.model_list().model_dump(mode="json"))

    @router.get(
        model_path("<model>"),
        summary="Retrieve a model this deployment routes to",
        responses=openapi.lookup_responses(ModelCard, "No such model (code model_not_found)."),
        tags=["OpenAI"],
    )
    def retrieve_model(model: str) -> Response[dict[str, Any]]:
        return json_response(200, gateway.model_list().card(model).model_dump(mode="json"))

    @router.get(HEALTH, summary="Liveness", responses=openapi.simple_responses(Health))
    def health() -> Response[dict[str, Any]]:
        return json_response(200, Health(status="ok", models=sorted(gateway.settings.routes)).model_dump())

    return router
