"""Speculative decoding's proposers and draft length (:mod:`snapllm.engine.decode`), without a model."""

from __future__ import annotations

from snapllm.engine.decode import Drafting, _Draft, _NgramIndex


def test_the_index_finds_what_followed_the_latest_earlier_occurrence_never_the_tail_itself():
    index = _NgramIndex([1, 2, 3, 9, 1, 2, 3, 7, 8], smallest=2, largest=3)
    # The tail (7, 8) occurred nowhere before: nothing.
    assert index.following(index.tokens, 4) == []
    index.append(1)
    index.append(2)
    index.append(3)
    # (1, 2, 3) occurred twice before: the latest one was followed by 7, 8.
    assert index.following(index.tokens, 4) == [7, 8, 1, 2]
    assert index.following(index.tokens, 1) == [7]
    # A shorter end where the longer one never occurred: (5, 2) no, (2,) below the smallest n-gram.
    assert index.following([5, 2], 3) == []
    assert index.following([9, 1, 2], 2) == [3, 7]


def test_forced_tokens_come_first_and_the_lookup_continues_through_them():
    class Forcing:
        def forced(self) -> list[int]:
            return [2, 3]

    draft = _Draft(Drafting(ngram=3, min_ngram=2, tokens=8), [1, 2, 3, 4, 5, 1])
    assert draft.guesses(Forcing(), 5) == [2, 3, 4, 5, 1]  # type: ignore[arg-type]
    assert draft.guesses(Forcing(), 1) == [2]  # type: ignore[arg-type]
    assert _Draft(Drafting(min_ngram=2, forced=False), [1, 2, 3, 1, 2]).guesses(Forcing(), 4) == [3, 1, 2]  # type: ignore[arg-type]


def test_the_length_follows_what_is_kept_and_a_batch_that_does_not_pay_off_pauses_drafting():
    draft = _Draft(Drafting(tokens=8), [])
    assert draft.room() == 8
    draft.record(8, 2, paid_off=True)
    assert draft.room() == 3
    draft.record(3, 3, paid_off=True)
    assert draft.room() == 6
    draft.record(6, 0, paid_off=False)  # no token sooner: one token without guesses
    assert [draft.room() for _ in range(2)] == [0, 1]
    draft.record(1, 0, paid_off=False)  # again: twice as long
    assert [draft.room() for _ in range(3)] == [0, 0, 1]
    draft.record(1, 1, paid_off=True)  # kept, and sooner: the pause resets, the length doubles
    assert draft.room() == 2
    draft.record(2, 1, paid_off=False)  # a guess kept, but the batch took longer than two tokens alone
    assert [draft.room() for _ in range(2)] == [0, 2]
