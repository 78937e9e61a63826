"""Chat completions, text completions and Responses: each invoked on its model's function, or the next target
of its fallback order."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import Router

from snapllm.protocol.completions.objects import ChatCompletion, Completion, ResponseObject
from snapllm.protocol.http import openapi
from snapllm.protocol.http.routes import CHAT_COMPLETIONS, COMPLETIONS, RESPONSES
from snapllm.protocol.requests import ChatCompletionRequest, CompletionRequest
from snapllm.protocol.responses.responses_api import ResponsesRequest
from snapllm.router.gateway import Gateway


def completion_routes(gateway: Gateway) -> Router:
    router = Router()

    @router.post(
        CHAT_COMPLETIONS,
        summary="Create a chat completion",
        responses=openapi.completion_responses(ChatCompletion),
        tags=["OpenAI"],
    )
    def create_chat_completion(request: ChatCompletionRequest) -> Response[dict[str, Any]]:
        return gateway.complete(request, CHAT_COMPLETIONS)

    @router.post(
        COMPLETIONS,
        summary="Create a text completion",
        responses=openapi.completion_responses(Completion),
        tags=["OpenAI"],
    )
    def create_completion(request: CompletionRequest) -> Response[dict[str, Any]]:
        return gateway.complete(request, COMPLETIONS)

    @router.post(
        RESPONSES,
        summary="Create a response (stateless: nothing is stored)",
        responses=openapi.completion_responses(ResponseObject),
        tags=["OpenAI"],
    )
    def create_response(request: ResponsesRequest) -> Response[dict[str, Any]]:
        return gateway.complete(request, RESPONSES)

    return router
