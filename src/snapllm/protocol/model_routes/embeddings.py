"""OpenAI's ``POST /v1/embeddings`` over an embedding engine (:mod:`snapllm.engine.embedding`).

    embeddings = EmbeddingServing(engine, limits=EmbeddingLimits(max_inputs=128, max_tokens=8192,
                                                                 max_input_chars=32_000))
    answer = embeddings.answer({"input": ["a text", "another"], "encoding_format": "base64"})

The inputs it takes, the limits checked before anything is embedded, normalisation and ``dimensions`` are
in docs/api.md ("Embeddings").
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from snapllm.engine.types import Deadline
from snapllm.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    UnsupportedParameterError,
)
from snapllm.protocol.requests import RequestBody, check_served_model, validation_error

EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class Embedder(Protocol):
    """What the embeddings route needs of a loaded model (an
    :class:`~snapllm.engine.embedding.EmbeddingEngine`)."""

    @property
    def model_name(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_embd(self) -> int: ...

    @property
    def n_vocab(self) -> int: ...

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]: ...

    def embed(
        self, inputs: Sequence[Sequence[int]], *, deadline: Deadline | None = None
    ) -> list[list[float]]: ...


class EmbeddingsRequest(RequestBody):
    """``POST /v1/embeddings``, OpenAI's fields."""

    model: str | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    """``base64``: each vector's little-endian float32 bytes, base64-encoded (what the official SDKs ask for
    and decode)."""
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None
    """Accepted and ignored: nothing is stored or billed per user here."""


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: EmbeddingUsage


@dataclass(frozen=True)
class EmbeddingLimits:
    """What one embeddings request may cost: inputs, characters per string, tokens over all inputs."""

    max_inputs: int
    max_tokens: int
    max_input_chars: int
    #: Whether the model was trained so that a prefix of its vectors is a vector too (``dimensions``).
    truncatable: bool = False


def parse_embeddings(body: Any) -> EmbeddingsRequest:
    try:
        return EmbeddingsRequest.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None


def _inputs(value: EmbeddingInput) -> tuple[list[str | list[int]], bool]:
    """The request's inputs, one per vector, and whether ``input`` was one input itself (a string or a
    token array) rather than a list of them."""
    if isinstance(value, str):
        return [value], True
    if value and all(isinstance(item, int) for item in value):
        return [list(value)], True  # type: ignore[arg-type]
    return list(value), False  # type: ignore[arg-type]


def normalised(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length (a zero vector stays zero)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


def _encoded(vector: list[float], encoding: Literal["float", "base64"]) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


class EmbeddingServing:
    """The embeddings route over one embedding engine: parse, bound, tokenize, embed, render."""

    def __init__(self, engine: Embedder, *, limits: EmbeddingLimits) -> None:
        self.engine = engine
        self.limits = limits
        self.model_name = engine.model_name

    def answer(self, body: Any, *, deadline: Deadline | None = None) -> dict[str, Any]:
        """The OpenAI embeddings list for a request body; a ``RequestError`` naming the field otherwise (a
        ``DeadlineExceededError`` when the inputs cannot all be embedded before ``deadline``)."""
        request = parse_embeddings(body)
        check_served_model(request.model, self.model_name)
        size = self._dimensions(request.dimensions)
        tokens = self.tokens(request.input)
        vectors = self.engine.embed(tokens, deadline=deadline)
        count = sum(len(t) for t in tokens)
        return EmbeddingList(
            data=[
                EmbeddingObject(
                    index=index, embedding=_encoded(normalised(vector[:size]), request.encoding_format)
                )
                for index, vector in enumerate(vectors)
            ],
            model=self.model_name,
            usage=EmbeddingUsage(prompt_tokens=count, total_tokens=count),
        ).model_dump()

    def _dimensions(self, requested: int | None) -> int:
        n_embd = self.engine.n_embd
        if requested is None or requested == n_embd:
            return n_embd
        if requested > n_embd:
            raise InvalidRequestError(
                f"dimensions is {requested}; this model's vectors have {n_embd}", param="dimensions"
            )
        if not self.limits.truncatable:
            raise UnsupportedParameterError(
                f"this model's vectors have {n_embd} dimensions and it was not trained for shorter ones "
                "(SNAPLLM_EMBEDDING_TRUNCATABLE is off); send dimensions "
                f"{n_embd} or none",
                param="dimensions",
            )
        return requested

    def tokens(self, value: EmbeddingInput) -> list[list[int]]:
        """Each input's tokens, every limit checked: inputs and characters before tokenizing, ids, each
        input's tokens and the total after."""
        inputs, single = _inputs(value)
        limits = self.limits
        if not inputs:
            raise InvalidRequestError("input is an empty list; send at least one input", param="input")
        if len(inputs) > limits.max_inputs:
            raise InvalidRequestError(
                f"input has {len(inputs)} items; this deployment embeds at most {limits.max_inputs} "
                "per request",
                param="input",
            )
        n_vocab, n_ctx = self.engine.n_vocab, self.engine.n_ctx
        tokens: list[list[int]] = []
        total = 0
        for index, item in enumerate(inputs):
            param = "input" if single else f"input.{index}"
            if isinstance(item, str):
                if len(item) > limits.max_input_chars:
                    raise ContextLengthExceededError(
                        f"{param} is {len(item)} characters; this deployment accepts at most "
                        f"{limits.max_input_chars} per input",
                        param=param,
                    )
                if not item:
                    raise InvalidRequestError(f"{param} is an empty string", param=param)
                ids = self.engine.tokenize(item, add_bos=True, special=False)
            else:
                if not item:
                    raise InvalidRequestError(f"{param} is an empty token array", param=param)
                bad = next((i for i, token in enumerate(item) if not 0 <= token < n_vocab), None)
                if bad is not None:
                    raise InvalidRequestError(
                        f"{param}.{bad}: {item[bad]} is not a token of this model "
                        f"(ids are 0 to {n_vocab - 1})",
                        param=f"{param}.{bad}",
                    )
                ids = item
            if len(ids) > n_ctx:
                raise ContextLengthExceededError(
                    f"{param} is {len(ids)} tokens; this model embeds at most {n_ctx} tokens per input",
                    param=param,
                )
            total += len(ids)
            if total > limits.max_tokens:
                raise ContextLengthExceededError(
                    f"input has more than {limits.max_tokens} tokens over all its items, the most this "
                    "deployment embeds per request",
                    param="input",
                )
            tokens.append(ids)
        return tokens
