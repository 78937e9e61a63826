"""The routes a model answers as routed events: embeddings, reranking and its tokens. No fallback: another
model's vectors or tokens are not this one's."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import Router

from snapllm.protocol.http import openapi
from snapllm.protocol.http.routes import (
    CHAT_INPUT_TOKENS,
    DETOKENIZE,
    EMBEDDINGS,
    RERANK,
    RERANK_ALIAS,
    TOKENIZE,
)
from snapllm.protocol.model_routes.embeddings import EmbeddingList, EmbeddingsRequest
from snapllm.protocol.model_routes.rerank import RerankList, RerankRequest
from snapllm.protocol.model_routes.tokens import (
    ChatTokenCount,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from snapllm.protocol.requests import ChatCompletionRequest
from snapllm.router.gateway import Gateway


def model_routes(gateway: Gateway) -> Router:
    router = Router()

    @router.post(
        EMBEDDINGS,
        summary="Create embeddings with an embedding model",
        responses=openapi.model_route_responses(EmbeddingList),
        tags=["OpenAI"],
    )
    def create_embeddings(request: EmbeddingsRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, EMBEDDINGS)

    @router.post(
        RERANK,
        summary="Rank documents by relevance to a query with a reranker (llama-server's, Jina's shape)",
        responses=openapi.model_route_responses(RerankList),
        tags=["Rerank"],
    )
    def rerank(request: RerankRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, RERANK)

    @router.post(
        RERANK_ALIAS,
        summary="Rank documents by relevance to a query (llama-server's other path of /v1/rerank)",
        responses=openapi.model_route_responses(RerankList),
        tags=["Rerank"],
    )
    def rerank_alias(request: RerankRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, RERANK_ALIAS)

    @router.post(
        CHAT_INPUT_TOKENS,
        summary="Count a chat completion request's prompt tokens without generating",
        responses=openapi.model_route_responses(ChatTokenCount),
        tags=["Tokens"],
    )
    def count_chat_tokens(request: ChatCompletionRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, CHAT_INPUT_TOKENS)

    @router.post(
        TOKENIZE,
        summary="Tokenize text with a model's vocabulary (llama-server's /tokenize)",
        responses=openapi.model_route_responses(TokenizeResponse),
        tags=["Tokens"],
    )
    def tokenize(request: TokenizeRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, TOKENIZE)

    @router.post(
        DETOKENIZE,
        summary="Turn token ids back into text (llama-server's /detokenize)",
        responses=openapi.model_route_responses(DetokenizeResponse),
        tags=["Tokens"],
    )
    def detokenize(request: DetokenizeRequest) -> Response[dict[str, Any]]:
        return gateway.route_to_model(request, DETOKENIZE)

    return router
