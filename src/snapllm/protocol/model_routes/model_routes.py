"""The routes a model function answers besides the completions: tokens, token counts, embeddings, reranking.

    routed_event("/tokenize", {"content": "Hello"})     # {"route": "/tokenize", "body": {...}}
    routes = ModelRoutes(model_name="smollm2", vocabulary=engine, serving=serving, max_chars=32_000)
    routes.answer("/tokenize", {"content": "Hello"})   # {"tokens": [...]}

A direct invoke names its route (docs/api.md says why); HTTP serves :data:`ROUTED_PATHS` with these bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snapllm.engine.types import Deadline
from snapllm.errors import (
    InvalidRequestError,
    RouteNotFoundError,
    UnsupportedParameterError,
)
from snapllm.protocol.http.routes import (
    CHAT_INPUT_TOKENS,
    DETOKENIZE,
    EMBEDDINGS,
    RERANK,
    RERANK_ALIAS,
    ROUTE_KEY,
    ROUTED_PATHS,
    TOKENIZE,
)
from snapllm.protocol.model_routes.embeddings import EmbeddingServing
from snapllm.protocol.model_routes.rerank import RerankServing, parse_rerank
from snapllm.protocol.model_routes.tokens import (
    ChatTokenCount,
    Vocabulary,
    detokenize,
    parse_detokenize,
    parse_tokenize,
    tokenize,
)
from snapllm.protocol.requests import check_served_model, require_object
from snapllm.protocol.serving import OpenAIServing


#: The key of a direct invoke that names its route (a completion's invoke has none).
def split_event(event: dict[str, Any]) -> tuple[str | None, Any]:
    """A direct invoke's route (None for a completion) and the body it carries."""
    if ROUTE_KEY not in event:
        return None, event
    extra = sorted(set(event) - {ROUTE_KEY, "body"})
    if extra:
        raise InvalidRequestError(
            f"a routed invoke has only 'route' and 'body'; not {extra[0]!r}", param=extra[0]
        )
    route = event[ROUTE_KEY]
    if route not in ROUTED_PATHS:
        raise RouteNotFoundError(f"no route {route!r}; routes: {', '.join(ROUTED_PATHS)}")
    return route, require_object(event.get("body"))


def count_chat_tokens(serving: OpenAIServing, body: Any) -> dict[str, Any]:
    """The prompt tokens of a chat completion request, prepared exactly as the completion would be
    (``stream`` is read and ignored: nothing is generated): the completion's own path, which docs/api.md
    says makes the count exact."""
    request = serving.parse(body, required="messages")
    prepared = serving.prepare(request)
    return ChatTokenCount(
        model=serving.model_name,
        input_tokens=prepared.prompt_tokens,
        context_window=serving.engine.n_ctx,
        max_completion_tokens=prepared.engine_request.max_tokens,
    ).model_dump()


class ModelRoutes:
    """The routed events of one loaded model: its vocabulary's routes, the chat count where it serves chat
    (``serving``), embeddings where it is an embedding model (``embeddings``), reranking where it is a
    reranker (``reranking``)."""

    def __init__(
        self,
        *,
        model_name: str,
        vocabulary: Vocabulary,
        serving: OpenAIServing | None,
        max_chars: int,
        embeddings: EmbeddingServing | None = None,
        reranking: RerankServing | None = None,
    ) -> None:
        self.model_name = model_name
        self.vocabulary = vocabulary
        self.serving = serving
        self.embeddings = embeddings
        self.reranking = reranking
        self.max_chars = max_chars
        # Each answer takes the body and the deadline (which only the routes that run the model use).
        self._answers: dict[str, Callable[[dict[str, Any], Deadline | None], dict[str, Any]]] = {
            TOKENIZE: self._tokenize,
            DETOKENIZE: self._detokenize,
            CHAT_INPUT_TOKENS: self._count,
            EMBEDDINGS: self._embed,
            RERANK: self._rerank,
            RERANK_ALIAS: self._rerank,
        }

    def answer(self, route: str, body: dict[str, Any], *, deadline: Deadline | None = None) -> dict[str, Any]:
        """The answer of ``route`` (one of :data:`ROUTED_PATHS`) to ``body``; a ``RequestError`` if the
        request cannot be served. Embeddings and reranking stop at ``deadline`` (between two batches)."""
        return self._answers[route](body, deadline)

    def _tokenize(self, body: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
        request = parse_tokenize(body)
        check_served_model(request.model, self.model_name)
        return tokenize(self.vocabulary, request, max_chars=self.max_chars)

    def _detokenize(self, body: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
        request = parse_detokenize(body)
        check_served_model(request.model, self.model_name)
        return detokenize(self.vocabulary, request)

    def _count(self, body: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
        if self.serving is None:
            raise UnsupportedParameterError(
                f"{self.model_name} is an embedding model: it serves no chat completions", param="model"
            )
        return count_chat_tokens(self.serving, body)

    def _embed(self, body: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
        if self.embeddings is None:
            kind = "a reranker (it serves /v1/rerank)" if self.reranking else "not an embedding model"
            raise UnsupportedParameterError(
                f"{self.model_name} is {kind}: deploy an embedding model to serve /v1/embeddings",
                param="model",
            )
        return self.embeddings.answer(body, deadline=deadline)

    def _rerank(self, body: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
        if self.reranking is None:
            # A malformed body is refused for what it is first, as the router's validation does.
            request = parse_rerank(body)
            check_served_model(request.model, self.model_name)
            kind = "an embedding model" if self.embeddings else "a chat model"
            raise UnsupportedParameterError(
                f"{self.model_name} is {kind}, not a reranker (a GGUF with rank pooling): deploy one to "
                "serve /v1/rerank",
                param="model",
            )
        return self.reranking.answer(body, deadline=deadline)
