"""The embedding engine: one llama.cpp model in embedding mode, pooling each input's tokens into a vector.

    engine = EmbeddingEngine.load(model.path, EngineSettings(embedding_pooling="mean"), model_name="e5")
    vectors = engine.embed([engine.tokenize("Hello", add_bos=True), [1, 2, 3]])   # one per input

With rank pooling it is a reranker (``score``: one score per sequence). It takes token lists only: text, and a
query joined with a document, are the protocol's. How it batches and pools: docs/decoding.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama

from snapllm.engine.loaded import LoadedModel, attention_params, maps_weights, model_params
from snapllm.engine.settings import EmbeddingPooling, EngineSettings
from snapllm.engine.types import Deadline
from snapllm.errors import (
    ContextLengthExceededError,
    DeadlineExceededError,
    InvalidRequestError,
    ModelLoadError,
)
from snapllm.system import available_cpus

#: llama.cpp's pooling types by the names the settings use ("model": the GGUF's own ``pooling_type``).
POOLING_TYPES: Mapping[EmbeddingPooling, int] = {
    "model": low_level.LLAMA_POOLING_TYPE_UNSPECIFIED,
    "mean": low_level.LLAMA_POOLING_TYPE_MEAN,
    "cls": low_level.LLAMA_POOLING_TYPE_CLS,
    "last": low_level.LLAMA_POOLING_TYPE_LAST,
    "rank": low_level.LLAMA_POOLING_TYPE_RANK,
}
_POOLING_NAMES = {value: name for name, value in POOLING_TYPES.items() if name != "model"}
PooledBy = Literal["mean", "cls", "last", "rank"]
#: The GGUF key of a reranker's prompt for one pair, with ``{query}`` and ``{document}`` in it.
RERANK_TEMPLATE_KEY = "tokenizer.chat_template.rerank"


class EmbeddingEngine(LoadedModel):
    """A loaded model that embeds for one request at a time (llama.cpp contexts are not thread-safe)."""

    def __init__(
        self,
        llama: Llama,
        *,
        model_name: str,
        model_digest: str | None = None,
        settings: EngineSettings | None = None,
    ) -> None:
        super().__init__(llama, model_name=model_name, model_digest=model_digest, settings=settings)
        pooling = int(llama._ctx.pooling_type())
        if pooling not in _POOLING_NAMES:
            # NONE: a model without a pooling type, such as a chat model.
            raise ModelLoadError(
                f"the model {model_name!r} pools its tokens with llama.cpp pooling type {pooling}, which "
                "gives no single vector per input; set SNAPLLM_EMBEDDING_POOLING to mean, cls, last or rank"
            )
        #: How the model pools its tokens: the setting's, or the GGUF's own.
        self.pooling: PooledBy = _POOLING_NAMES[pooling]  # type: ignore[assignment]
        #: The values of one input's pooled output: the vector's size, or a reranker's head's outputs.
        self.n_outputs = (
            int(low_level.llama_model_n_cls_out(llama._model.model)) if self.is_reranker else self.n_embd
        )

    @classmethod
    def load(
        cls,
        model_path: str,
        settings: EngineSettings,
        *,
        model_name: str,
        source: str | None = None,
        model_digest: str | None = None,
    ) -> EmbeddingEngine:
        """Load a GGUF file in embedding mode, pooling as ``settings.embedding_pooling`` says ("model" when
        unset); :class:`ModelLoadError` if llama.cpp refuses it or it has no pooling to give one vector."""
        threads = settings.threads or available_cpus()
        try:
            with model_params(settings):
                llama = Llama(
                    model_path=model_path,
                    n_ctx=settings.n_ctx,
                    # One batch holds a whole context window: any sequence that fits the context fits a batch.
                    n_batch=settings.n_ctx,
                    n_ubatch=settings.n_ctx,
                    n_threads=threads,
                    n_threads_batch=threads,
                    embedding=True,
                    pooling_type=POOLING_TYPES[settings.embedding_pooling or "model"],
                    use_mmap=maps_weights(model_path, settings),
                    **attention_params(settings),
                    verbose=settings.verbose,
                )
        except ValueError as exc:
            raise ModelLoadError(
                f"llama.cpp could not load the embedding model {model_name!r} from {source or model_path}: "
                f"{exc} (set SNAPLLM_LLAMA_VERBOSE=true to see llama.cpp's reason)"
            ) from exc
        return cls(llama, model_name=model_name, model_digest=model_digest, settings=settings)

    # --- What the model is ----------------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """The most tokens one input may have."""
        return int(self._llama.context_params.n_ctx)

    @property
    def n_embd(self) -> int:
        """The size of the model's vectors."""
        return int(self._llama.n_embd())

    @property
    def n_vocab(self) -> int:
        return int(self._llama.n_vocab())

    @property
    def is_reranker(self) -> bool:
        """Whether the model scores sequences (rank pooling) rather than embedding them."""
        return self.pooling == "rank"

    @property
    def rerank_template(self) -> str | None:
        """The GGUF's prompt for one query-document pair (``{query}``, ``{document}``), if it has one."""
        return self.metadata.get(RERANK_TEMPLATE_KEY)

    @property
    def bos_token(self) -> int | None:
        return self._special(low_level.llama_vocab_bos)

    @property
    def eos_token(self) -> int | None:
        return self._special(low_level.llama_vocab_eos)

    @property
    def sep_token(self) -> int | None:
        return self._special(low_level.llama_vocab_sep)

    @property
    def add_bos(self) -> bool:
        """Whether the tokenizer puts a BOS before a text (``tokenizer.ggml.add_bos_token``)."""
        return bool(low_level.llama_vocab_get_add_bos(self._llama._model.vocab))

    @property
    def add_eos(self) -> bool:
        return bool(low_level.llama_vocab_get_add_eos(self._llama._model.vocab))

    @property
    def add_sep(self) -> bool:
        return bool(low_level.llama_vocab_get_add_sep(self._llama._model.vocab))

    def _special(self, which: Callable[[Any], int]) -> int | None:
        token = int(which(self._llama._model.vocab))
        return None if token == low_level.LLAMA_TOKEN_NULL else token

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        """``text`` as tokens; ``add_bos`` adds the special tokens the model's tokenizer asks for (a BOS, or
        BERT's CLS and SEP, or an EOS for last-token pooling)."""
        return self._llama.tokenize(text.encode(), add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """The bytes ``tokens`` stand for; each id must be below :attr:`n_vocab`."""
        return self._llama.detokenize(list(tokens), special=True)

    # --- Embedding ------------------------------------------------------------------------------------------

    def score(self, inputs: Sequence[Sequence[int]], *, deadline: Deadline | None = None) -> list[float]:
        """A reranker's score of each input (a query-document pair as tokens), in order: the first value of
        its classification head as llama.cpp gives it (a Qwen3 reranker's after llama.cpp's softmax over its
        labels, a BERT one's raw), as llama-server reports it. Batched as :meth:`embed`."""
        if not self.is_reranker:
            raise InvalidRequestError(
                f"{self.model_name} pools its tokens with {self.pooling} pooling: it embeds, it does not "
                "score (a reranker has rank pooling)",
                param="model",
            )
        return [outputs[0] for outputs in self.embed(inputs, deadline=deadline, noun="documents")]

    def embed(
        self, inputs: Sequence[Sequence[int]], *, deadline: Deadline | None = None, noun: str = "inputs"
    ) -> list[list[float]]:
        """One pooled vector per input, in order (a reranker's: its head's :attr:`n_outputs` values). Each
        input must have at least one token and fewer than :attr:`n_ctx`; its ids must be in the vocabulary
        (the protocol checks both, this refuses again).

        Before each batch after the first, a ``deadline`` that the batch would pass (at the last batch's
        pace), or that is cancelled, stops the work: :class:`DeadlineExceededError`, saying how many of the
        ``noun`` (the inputs, a rerank's documents) were done."""
        n_ctx, n_vocab = self.n_ctx, self.n_vocab
        for index, tokens in enumerate(inputs):
            if not tokens:
                raise InvalidRequestError(f"input {index} has no tokens", param=f"input.{index}")
            if len(tokens) > n_ctx:
                raise ContextLengthExceededError(
                    f"input {index} is {len(tokens)} tokens; this model embeds at most {n_ctx}",
                    param=f"input.{index}",
                )
            if not all(0 <= token < n_vocab for token in tokens):
                raise InvalidRequestError(f"input {index} has a token id outside the vocabulary")
        llama = self._llama
        max_sequences = int(llama.context_params.n_seq_max)
        vectors: list[list[float]] = []
        started = time.perf_counter()
        pace = 0.0  # seconds per token of the last batch

        def decode(sizes: list[int]) -> None:
            nonlocal pace
            tokens = sum(sizes)
            if deadline is not None and vectors:
                done = f"{len(vectors)} of the {len(inputs)} {noun} were evaluated in "
                done += f"{time.perf_counter() - started:.1f} s"
                if deadline.cancelled:
                    raise DeadlineExceededError(f"the request was cancelled ({done})")
                if deadline.remaining() < pace * tokens:
                    raise DeadlineExceededError(
                        f"the {noun} could not all be evaluated within the time limit ({done}; the next "
                        f"{len(sizes)} would pass it): there is nothing to return; send fewer {noun} per "
                        "request"
                    )
            began = time.perf_counter()
            vectors.extend(self._decode(len(sizes)))
            pace = (time.perf_counter() - began) / tokens

        with self._running():
            batch, context = llama._batch, llama._ctx
            batch.reset()
            sizes: list[int] = []
            try:
                for tokens in inputs:
                    if sizes and (sum(sizes) + len(tokens) > n_ctx or len(sizes) >= max_sequences):
                        decode(sizes)
                        sizes = []
                    # Every token is an output: llama.cpp pools over the outputs of a sequence.
                    batch.add_sequence(list(tokens), len(sizes), True)
                    sizes.append(len(tokens))
                if sizes:
                    decode(sizes)
            finally:
                batch.reset()
                context.kv_cache_clear()
        return vectors

    def _decode(self, sequences: int) -> list[list[float]]:
        """Evaluate the batch of ``sequences`` sequences; their pooled vectors. The caller holds the lock."""
        llama = self._llama
        llama._ctx.kv_cache_clear()
        llama._ctx.decode(llama._batch)
        llama._batch.reset()
        size = self.n_outputs
        return [
            list(low_level.llama_get_embeddings_seq(llama._ctx.ctx, seq)[:size]) for seq in range(sequences)
        ]
