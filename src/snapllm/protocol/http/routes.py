"""Every HTTP route's path, named once: the router, the streaming app, the local gateway, the routed
events and the field table read them here."""

from __future__ import annotations

from typing import Any

CHAT_COMPLETIONS = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MODELS = "/v1/models"
HEALTH = "/health"
OPENAPI = "/openapi.json"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
CHAT_INPUT_TOKENS = "/v1/chat/completions/input_tokens"
EMBEDDINGS = "/v1/embeddings"
RERANK = "/v1/rerank"
#: llama-server's other path of the same route (Jina's clients post to /v1/rerank).
RERANK_ALIAS = "/rerank"

#: The completion routes: a request with ``stream=true`` streams from the streaming endpoint.
COMPLETION_PATHS = (CHAT_COMPLETIONS, COMPLETIONS, RESPONSES)
#: Every route the router invokes its model with as a routed event.
ROUTED_PATHS = (TOKENIZE, DETOKENIZE, CHAT_INPUT_TOKENS, EMBEDDINGS, RERANK, RERANK_ALIAS)


def model_path(model: str) -> str:
    """The path of one model's card (``GET /v1/models/{model}``)."""
    return f"{MODELS}/{model}"


#: The key of a direct invoke's route: ``{"route": "/v1/embeddings", "body": {...}}`` (a completion has none).
ROUTE_KEY = "route"


def routed_event(route: str, body: dict[str, Any]) -> dict[str, Any]:
    """The direct invoke of ``route`` with ``body``."""
    return {ROUTE_KEY: route, "body": body}
