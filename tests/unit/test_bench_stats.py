"""The benchmarks' summaries: a ratio taken round by round."""

from __future__ import annotations

import pytest

from snapllm_dev.bench.stats import PairedRatio


def test_paired_ratio_follows_each_rounds_own_ratio_through_a_drifting_host() -> None:
    # The host halves its speed in the last two rounds; one side stays 10% ahead in every round. The ratio
    # of the medians would say 0.75 (ours' median 20 / the base's 26.67); the rounds' own ratios say 1.1.
    ours = [44.0, 44.0, 22.0, 22.0, 22.0]
    base = [40.0, 40.0, 20.0, 20.0, 20.0]
    paired = PairedRatio.of(ours, base)
    assert paired.median == pytest.approx(1.1)
    assert paired.quartiles == pytest.approx((1.1, 1.1))


def test_paired_ratio_quartiles_show_how_far_rounds_disagree() -> None:
    paired = PairedRatio.of([1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 5)
    assert paired.median == 3.0
    assert paired.quartiles == (2.0, 4.0)


def test_paired_ratio_skips_a_round_without_a_base_and_needs_one_round() -> None:
    assert PairedRatio.of([3.0, 5.0], [0.0, 4.0]) == PairedRatio(1.25, (1.25, 1.25))
    with pytest.raises(ValueError, match="no rounds"):
        PairedRatio.of([3.0], [0.0])
    with pytest.raises(ValueError):
        PairedRatio.of([3.0, 4.0], [1.0])  # unpaired rounds
