"""``snapllm bench coldstart`` compares the first request after a restore with a warm one: that comparison
only measures the restore when both evaluate the same number of prompt tokens. Its two prompts must have
one length and share nothing but the beginning-of-sequence token, so that neither reuses a cached word of
the other (one token more is over 10% of a 10-token prompt's evaluation). Checked with every family's real
tokenizer and the packaged models', as the benchmark's users run it on their own models."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_cpp import Llama

from snapllm_dev.bench.coldstart import FIRST, OTHER
from snapllm_dev.packaged_models import model_path
from tests.support.family_models import FAMILY_NAMES, family_model

PACKAGED = ("smollm2-135m", "gemma3-270m")


def _gguf(name: str) -> Path:
    return model_path(name) if name in PACKAGED else family_model(name).path


@pytest.mark.parametrize("name", [*FAMILY_NAMES, *PACKAGED])
def test_the_first_and_the_warm_prompt_evaluate_alike(name: str) -> None:
    vocab = Llama(model_path=str(_gguf(name)), vocab_only=True, verbose=False)
    first, other = (vocab.tokenize(request["prompt"].encode(), add_bos=True) for request in (FIRST, OTHER))
    assert len(first) == len(other), (first, other)
    shared = next(i for i, (a, b) in enumerate(zip(first, other, strict=True)) if a != b)
    # Nothing, or the beginning-of-sequence token where the tokenizer adds one.
    assert first[:shared] in ([], [vocab.token_bos()]), (first[:3], other[:3])
