"""The summaries of a benchmark's samples: percentiles, extremes and mean; and a ratio taken pair by pair.

>>> Percentiles.of([1.0, 2.0, 3.0, 4.0]).p50
2.5
>>> PairedRatio.of([2.0, 3.0, 4.0], [2.0, 2.0, 2.0]).median
1.5
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p95/p99 (inclusive method: interpolated within the values' own range), min, max and mean."""

    n: int
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        """The summary of at least one value."""
        if not values:
            raise ValueError("no samples to summarize")
        if len(values) == 1:
            only = values[0]
            return cls(1, only, only, only, only, only, only, only)
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(
            len(values),
            cuts[49],
            cuts[89],
            cuts[94],
            cuts[98],
            min(values),
            max(values),
            statistics.fmean(values),
        )

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {name: value if name == "n" else round(value, digits) for name, value in asdict(self).items()}


@dataclass(frozen=True)
class PairedRatio:
    """The ratio of two sides measured round by round: the median of each round's own ratio, and the
    quartiles of those ratios. A host's drift between rounds moves both sides of a round's ratio, and the
    quartiles show how far the rounds disagreed."""

    median: float
    quartiles: tuple[float, float]

    @classmethod
    def of(cls, values: list[float], bases: list[float]) -> PairedRatio:
        """``values[i] / bases[i]`` summarized, for rounds whose base is not zero (at least one)."""
        ratios = [value / base for value, base in zip(values, bases, strict=True) if base]
        if not ratios:
            raise ValueError("no rounds to pair")
        if len(ratios) == 1:
            return cls(ratios[0], (ratios[0], ratios[0]))
        first, _, third = statistics.quantiles(ratios, n=4, method="inclusive")
        return cls(statistics.median(ratios), (first, third))


def summarize(values: list[float]) -> dict[str, float]:
    """:meth:`Percentiles.of` as a dict, or ``{"n": 0}`` without samples."""
    return Percentiles.of(values).as_dict() if values else {"n": 0}
