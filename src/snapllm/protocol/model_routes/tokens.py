"""Token routes: llama-server's ``/tokenize`` and ``/detokenize``, and the answer of a chat request's prompt
counted without generating (``/v1/chat/completions/input_tokens``,
:func:`~snapllm.protocol.model_routes.model_routes.count_chat_tokens`).

    tokenize(engine, TokenizeRequest(content="Hello"), max_chars=32_000)    # {"tokens": [19556]}

Nothing here imports the serving class: the router validates these bodies without loading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from snapllm.errors import InvalidRequestError
from snapllm.protocol.requests import RequestBody, validation_error

#: Most token ids one ``/detokenize`` takes (a tokenize answer's worth for the longest prompt accepted).
MAX_DETOKENIZE_TOKENS = 32_768


class Vocabulary(Protocol):
    """What the token routes need of a loaded model (a text or an embedding engine)."""

    @property
    def n_vocab(self) -> int: ...

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> bytes: ...


class TokenizeRequest(RequestBody):
    """``POST /tokenize``: llama-server's fields (``model`` picks the model behind the router)."""

    model: str | None = None
    content: str
    add_special: bool = False
    """Add the model's beginning-of-sequence token, as a prompt gets."""
    parse_special: bool = True
    """Read control tokens written in the text (``<|im_start|>``) as such, else as plain text."""
    with_pieces: bool = False
    """Answer each token with its text: ``{"id", "piece"}``, the piece a string, or its bytes when they are
    not UTF-8 on their own."""


class DetokenizeRequest(RequestBody):
    """``POST /detokenize``: token ids back to text."""

    model: str | None = None
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE_TOKENS)


class TokenPiece(BaseModel):
    id: int
    piece: str | list[int]


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeResponse(BaseModel):
    content: str


class ChatTokenCount(BaseModel):
    """``POST /v1/chat/completions/input_tokens``: modelled on OpenAI's ``/v1/responses/input_tokens``."""

    object: Literal["chat.completion.input_tokens"] = "chat.completion.input_tokens"
    model: str
    input_tokens: int
    """The prompt's tokens as the chat completion would evaluate them (its ``usage.prompt_tokens``)."""
    context_window: int
    """The model's context window, in tokens."""
    max_completion_tokens: int
    """The most tokens the completion could generate: ``max_tokens`` (or the deployment's limit), capped
    by what the context window leaves after the prompt."""


def _parse[Body: RequestBody](model: type[Body], body: Any) -> Body:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None


def parse_tokenize(body: Any) -> TokenizeRequest:
    return _parse(TokenizeRequest, body)


def parse_detokenize(body: Any) -> DetokenizeRequest:
    return _parse(DetokenizeRequest, body)


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


def tokenize(vocabulary: Vocabulary, request: TokenizeRequest, *, max_chars: int) -> dict[str, Any]:
    """The tokens of ``request.content``; content over ``max_chars`` characters is refused untokenized."""
    if len(request.content) > max_chars:
        raise InvalidRequestError(
            f"content is {len(request.content)} characters; this deployment accepts at most {max_chars}",
            param="content",
        )
    tokens = vocabulary.tokenize(request.content, add_bos=request.add_special, special=request.parse_special)
    if not request.with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": token, "piece": _piece(vocabulary.detokenize([token]))} for token in tokens]}


def detokenize(vocabulary: Vocabulary, request: DetokenizeRequest) -> dict[str, Any]:
    """The text of ``request.tokens`` (bytes that are not UTF-8 become U+FFFD); every id is checked
    against the vocabulary first."""
    n_vocab = vocabulary.n_vocab
    for index, token in enumerate(request.tokens):
        if not 0 <= token < n_vocab:
            raise InvalidRequestError(
                f"tokens.{index}: {token} is not a token of this model (ids are 0 to {n_vocab - 1})",
                param=f"tokens.{index}",
            )
    return {"content": vocabulary.detokenize(request.tokens).decode("utf-8", errors="replace")}
