"""The engine's greedy pick under logit biases (``LogitBiases.argmax``) against llama.cpp's rule: each bias
entry added in turn to its float32 logit, then the first highest. No model runs: the logits are made here."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from snapllm.engine.decode import LogitBiases

VOCAB = 12
_LOGIT = st.floats(-30.0, 30.0, width=32)
# Bans, and nudges near the logits' own scale so that ties and near-ties come up (repeats too).
_BIAS = st.one_of(st.just(float("-inf")), st.floats(-5.0, 5.0, width=32), st.sampled_from([0.0, 1e-7, 100.0]))


def reference(logits: np.ndarray, pairs: list[tuple[int, float]]) -> int:
    """llama.cpp's logit-bias sampler, then greedy: every entry added in turn in float32, first highest."""
    biased = logits.copy()
    with np.errstate(over="ignore"):
        for token, bias in pairs:
            biased[token] = np.float32(biased[token] + np.float32(bias))
    return int(biased.argmax())


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_LOGIT, min_size=VOCAB, max_size=VOCAB),
    st.lists(st.tuples(st.integers(0, VOCAB - 1), _BIAS), max_size=12),
)
def test_the_pick_is_llama_cpps_greedy_pick_over_the_biased_logits(values, pairs):
    logits = np.array(values, dtype=np.single)
    untouched = logits.copy()
    assert LogitBiases(pairs).argmax(logits) == reference(untouched, pairs)
    assert np.array_equal(logits, untouched)  # the buffer is llama.cpp's: left as it was


def test_a_banned_best_token_gives_the_next_best_and_ties_go_to_the_first():
    logits = np.array([1.0, 5.0, 3.0, 3.0], dtype=np.single)
    # The best token biased down: the biases go over the whole vocabulary. Tokens 2 and 3 tie: 2 wins.
    assert LogitBiases([(1, float("-inf"))]).argmax(logits) == 2
    assert LogitBiases([(3, 2.0)]).argmax(logits) == 1  # 3 + 2 ties with 5: the earlier token keeps it
    assert LogitBiases([(3, 2.5)]).argmax(logits) == 3
    # Repeated entries add up, as llama.cpp adds them: 3 + 1.5 + 1.5 beats 5.
    assert LogitBiases([(2, 1.5), (2, 1.5)]).argmax(logits) == 2
    # More biased tokens than are weighed one by one: the same rule over the whole vocabulary.
    wide = np.arange(12, dtype=np.single)
    many = [(token, 0.5) for token in range(10)] + [(0, 20.0)]
    assert LogitBiases(many).argmax(wide) == reference(wide, many) == 0
    # A sum past float32's range is infinity, as llama.cpp's float32 addition makes it.
    huge = np.array([np.finfo(np.single).max, 1.0], dtype=np.single)
    assert LogitBiases([(0, 100.0), (0, 3e38), (1, 3e38)]).argmax(huge) == 0
