"""``POST /v1/rerank`` (llama-server's and Jina's shape, also at ``/rerank``) over a reranker: an embedding
engine with rank pooling (:mod:`snapllm.engine.embedding`).

    reranking = RerankServing(engine, limits=EmbeddingLimits(max_inputs=128, max_tokens=8192,
                                                              max_input_chars=32_000))
    answer = reranking.answer({"query": "What is a cat?", "documents": ["A cat is..."], "top_n": 1})

Each document is scored with the query as one sequence, as llama-server builds it; a request's cost is
bounded as an embeddings request's is. docs/api.md ("Rerank") says how the pairs are built and scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from snapllm.engine.types import Deadline
from snapllm.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    UnsupportedParameterError,
)
from snapllm.protocol.model_routes.embeddings import EmbeddingLimits, EmbeddingUsage
from snapllm.protocol.requests import STRICT, RequestBody, check_served_model, validation_error

QUERY_PLACEHOLDER = "{query}"
DOCUMENT_PLACEHOLDER = "{document}"


class SpecialTokens(Protocol):
    """A vocabulary's BOS, EOS and SEP (None where it has none) and whether its tokenizer adds each."""

    @property
    def bos_token(self) -> int | None: ...

    @property
    def eos_token(self) -> int | None: ...

    @property
    def sep_token(self) -> int | None: ...

    @property
    def add_bos(self) -> bool: ...

    @property
    def add_eos(self) -> bool: ...

    @property
    def add_sep(self) -> bool: ...


class Reranker(SpecialTokens, Protocol):
    """What the rerank route needs of a loaded model (an
    :class:`~snapllm.engine.embedding.EmbeddingEngine` with rank pooling)."""

    @property
    def model_name(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def is_reranker(self) -> bool: ...

    @property
    def rerank_template(self) -> str | None: ...

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]: ...

    def score(self, inputs: Sequence[Sequence[int]], *, deadline: Deadline | None = None) -> list[float]: ...


class RerankDocument(BaseModel):
    """A document as Jina's and Cohere's clients send it (and as ``return_documents`` gives it back)."""

    model_config = STRICT
    text: str


class RerankRequest(RequestBody):
    """``POST /v1/rerank``: llama-server's and Jina's fields."""

    model: str | None = None
    query: str
    documents: list[str | RerankDocument]
    """Strings, or objects with ``text``."""
    top_n: int | None = Field(None, ge=1)
    """How many results to return, best first (default: all)."""
    return_documents: bool = False
    """Give each result its document's text (``document: {"text": ...}``)."""


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankList(BaseModel):
    model: str
    object: Literal["list"] = "list"
    usage: EmbeddingUsage
    results: list[RerankResult]


def parse_rerank(body: Any) -> RerankRequest:
    try:
        return RerankRequest.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None


def fill_rerank_template(template: str, query: str, document: str) -> str:
    """The rerank prompt of one pair: every ``{query}`` and ``{document}`` of ``template`` replaced (the
    query first, so a query that holds ``{document}`` stays as written)."""
    parts = template.split(QUERY_PLACEHOLDER)
    return query.join(part.replace(DOCUMENT_PLACEHOLDER, document) for part in parts)


def pair_tokens(model: SpecialTokens, query: Sequence[int], document: Sequence[int]) -> list[int]:
    """One pair as a model without a rerank prompt reads it, from the query's and the document's tokens
    (as text, no special tokens): BOS? query EOS? SEP? document EOS?, each special token where the
    tokenizer adds it (EOS stands in for by SEP on a model without one)."""
    eos = model.eos_token if model.eos_token is not None else model.sep_token
    tokens: list[int] = []
    if model.add_bos and model.bos_token is not None:
        tokens.append(model.bos_token)
    tokens += query
    if model.add_eos and eos is not None:
        tokens.append(eos)
    if model.add_sep and model.sep_token is not None:
        tokens.append(model.sep_token)
    tokens += document
    if model.add_eos and eos is not None:
        tokens.append(eos)
    return tokens


class RerankServing:
    """The rerank route over one reranker: parse, bound, build each pair, score, sort, render."""

    def __init__(self, engine: Reranker, *, limits: EmbeddingLimits) -> None:
        self.engine = engine
        self.limits = limits
        self.model_name = engine.model_name

    def answer(self, body: Any, *, deadline: Deadline | None = None) -> dict[str, Any]:
        """The ranked results for a request body; a ``RequestError`` naming the field otherwise (a
        ``DeadlineExceededError`` when the documents cannot all be scored before ``deadline``)."""
        request = parse_rerank(body)
        check_served_model(request.model, self.model_name)
        texts = [d if isinstance(d, str) else d.text for d in request.documents]
        pairs = self.pairs(request.query, texts)
        scores = self.engine.score(pairs, deadline=deadline)
        ranked = sorted(range(len(texts)), key=lambda index: scores[index], reverse=True)
        count = sum(len(pair) for pair in pairs)
        return RerankList(
            model=self.model_name,
            usage=EmbeddingUsage(prompt_tokens=count, total_tokens=count),
            results=[
                RerankResult(
                    index=index,
                    relevance_score=scores[index],
                    document=RerankDocument(text=texts[index]) if request.return_documents else None,
                )
                for index in ranked[: request.top_n]
            ],
        ).model_dump(exclude_none=True)

    def pairs(self, query: str, documents: Sequence[str]) -> list[list[int]]:
        """Each query-document pair's tokens, every limit checked: documents and characters before
        tokenizing, each pair's tokens and the total after."""
        limits, engine = self.limits, self.engine
        if not engine.is_reranker:
            raise UnsupportedParameterError(
                f"{self.model_name} is not a reranker (it has no rank pooling): deploy one to serve "
                "/v1/rerank",
                param="model",
            )
        if not documents:
            raise InvalidRequestError("documents is an empty list; send at least one", param="documents")
        if len(documents) > limits.max_inputs:
            raise InvalidRequestError(
                f"documents has {len(documents)} items; this deployment reranks at most {limits.max_inputs} "
                "per request",
                param="documents",
            )
        query_tokens = self._text_tokens(query, "query")
        template = engine.rerank_template
        n_ctx = engine.n_ctx
        pairs: list[list[int]] = []
        total = 0
        for index, document in enumerate(documents):
            param = f"documents.{index}"
            document_tokens = self._text_tokens(document, param)
            if template is not None:
                tokens = engine.tokenize(fill_rerank_template(template, query, document), add_bos=False)
            else:
                tokens = pair_tokens(engine, query_tokens, document_tokens)
            if len(tokens) > n_ctx:
                raise ContextLengthExceededError(
                    f"the query and {param} are {len(tokens)} tokens together; this model scores at most "
                    f"{n_ctx} tokens per pair",
                    param=param,
                )
            total += len(tokens)
            if total > limits.max_tokens:
                raise ContextLengthExceededError(
                    f"the query and documents make more than {limits.max_tokens} tokens over all pairs, the "
                    "most this deployment scores per request",
                    param="documents",
                )
            pairs.append(tokens)
        return pairs

    def _text_tokens(self, text: str, param: str) -> list[int]:
        """``text``'s tokens as text; refused if empty, too long, or holding a control token's text (which
        the rerank prompt, tokenized with its control tokens, would read as one)."""
        if len(text) > self.limits.max_input_chars:
            raise ContextLengthExceededError(
                f"{param} is {len(text)} characters; this deployment accepts at most "
                f"{self.limits.max_input_chars} per text",
                param=param,
            )
        if not text:
            raise InvalidRequestError(f"{param} is an empty string", param=param)
        tokens = self.engine.tokenize(text, add_bos=False, special=False)
        if self.engine.rerank_template is not None and self.engine.tokenize(text, add_bos=False) != tokens:
            raise InvalidRequestError(
                f"{param} holds the text of a control token of this model (such as the end of a turn), "
                "which the rerank prompt would read as that token",
                param=param,
            )
        return tokens
