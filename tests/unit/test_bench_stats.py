"""The benchmarks' summaries: a ratio taken round by round, and the interval its median lies in."""

from __future__ import annotations

import random

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
    assert PairedRatio.of([3.0, 5.0], [0.0, 4.0]) == PairedRatio(1.25, (1.25, 1.25), (1.25, 1.25))
    with pytest.raises(ValueError, match="no rounds"):
        PairedRatio.of([3.0], [0.0])
    with pytest.raises(ValueError):
        PairedRatio.of([3.0, 4.0], [1.0])  # unpaired rounds
    with pytest.raises(ValueError, match="load"):
        PairedRatio.of([3.0, 4.0], [1.0, 1.0], loads=[0])


def test_the_interval_resamples_loads_not_only_rounds() -> None:
    # Three loads whose rounds agree within each load and not between them: the median could as well be
    # any load's, which rounds taken one by one (30 of them, as if from one load) would hide.
    ratios = [0.9] * 10 + [1.0] * 10 + [1.1] * 10
    loads = [0] * 10 + [1] * 10 + [2] * 10
    by_load = PairedRatio.of(ratios, [1.0] * 30, loads=loads)
    as_one_load = PairedRatio.of(ratios, [1.0] * 30)
    assert by_load.median == as_one_load.median == 1.0
    assert by_load.interval == (0.9, 1.1)
    low, high = as_one_load.interval
    assert 0.9 < low <= 1.0 <= high < 1.1


def test_the_interval_is_the_same_for_the_same_rounds_and_narrows_with_agreement() -> None:
    noisy = PairedRatio.of([0.9, 1.1, 0.95, 1.05, 1.0, 0.92, 1.08], [1.0] * 7)
    assert noisy == PairedRatio.of([0.9, 1.1, 0.95, 1.05, 1.0, 0.92, 1.08], [1.0] * 7)  # seeded
    assert noisy.interval[0] <= noisy.median <= noisy.interval[1]
    steady = PairedRatio.of([1.0, 1.01, 0.99, 1.0, 1.0, 1.01, 0.99], [1.0] * 7)
    assert steady.interval[1] - steady.interval[0] < (noisy.interval[1] - noisy.interval[0]) / 4


def test_the_interval_holds_the_true_ratio_in_most_simulated_runs() -> None:
    # Runs of 4 loads x 5 rounds from a machine whose loads are each up to ~4% off and whose rounds are too,
    # around a true ratio of 1.0. A percentile interval from four loads is a little narrow (nominally 95%);
    # rounds resampled as one load would hold the true ratio in about three runs of four.
    draw = random.Random(7)
    runs, held = 100, 0
    for _ in range(runs):
        ratios, loads = [], []
        for load in range(4):
            offset = draw.gauss(0.0, 0.04)
            for _ in range(5):
                ratios.append(1.0 + offset + draw.gauss(0.0, 0.04))
                loads.append(load)
        low, high = PairedRatio.of(ratios, [1.0] * len(ratios), loads=loads).interval
        held += low <= 1.0 <= high
    assert held >= 85
