"""``snapllm bench coldstart`` compares the first request after a restore with a warm one: that comparison
only measures the restore when both evaluate the same number of prompt tokens. Its two prompts must have
one length and share nothing but the beginning-of-sequence token, so that neither reuses a cached word of
the other (one token more is over 10% of a 10-token prompt's evaluation). Checked with every family's real
tokenizer and the packaged models', as the benchmark's users run it on their own models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp import Llama

from snapllm_dev.bench.coldstart import FIRST, OTHER
from snapllm_dev.packaged_models import model_path
from tests.support.cli import ENV
from tests.support.family_models import FAMILY_NAMES, family_model
from tests.support.paths import REPO

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


def test_a_run_whose_requests_evaluate_unequal_prompts_is_refused_with_a_message():
    # The warm prompt set back to one that begins with the first prompt's first five words: the warm request
    # of FIRST then reuses a whole row group of them (the cache is reused in groups of four positions) and
    # evaluates fewer tokens than the first one, and the run says so instead of giving a figure.
    script = (
        "import sys; from snapllm_dev.bench import coldstart; from snapllm_dev.cli import main; "
        "coldstart.OTHER['prompt'] = 'Three common uses of a summer sunset sky are'; "
        "sys.argv = ['snapllm', 'bench', 'coldstart', '--rounds', '1', '--invokes', '1', '--restores', '1', "
        "'--prefault', 'all']; sys.exit(main())"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 1, run.stderr
    assert "not comparable" in run.stderr and "cached_tokens" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
