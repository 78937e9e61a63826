"""Monthly cost of a workload on Lambda (with SnapStart) and on always-on options, and their break-even.

Lambda bills each request's duration (rounded up to the millisecond) times the allocated memory, plus the
request charge, plus SnapStart: every live published version's snapshot cache, and each restore (per GB
restored, and its duration billed like an invoke). An always-on option runs enough units for the peak
concurrency all month, whatever the traffic. Break-even is the volume at which Lambda's bill reaches the
always-on one; utilization there is the share of the always-on capacity the traffic keeps busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from snapllm_dev.cost.prices import AlwaysOnPrice, Architecture, Prices

Term = Literal["on_demand", "reserved_1y"]
TERMS: tuple[Term, ...] = ("on_demand", "reserved_1y")
HOURS_PER_DAY = 24
# Lambda's CPU share: 1,769 MB is one vCPU, up to 6 vCPUs at 10,240 MB.
LAMBDA_MB_PER_VCPU = 1769
LAMBDA_MAX_VCPUS = 6
# Break-even search range, requests per day.
SEARCH_FLOOR, SEARCH_CEILING = 1.0, 1e9


@dataclass(frozen=True)
class Speed:
    """The model's measured speed in one warm environment."""

    tokens_per_s: float
    """Decode rate of one generation, completion tokens per second."""
    ttft_s: float
    """Time to first token (prompt processing) at ``ttft_prompt_tokens``."""
    ttft_prompt_tokens: int | None = None
    """Prompt length the time to first token was measured at; None: at the workload's own prompt length."""
    cold_extra_s: float = 0.0
    """Billed time a cold start adds: the restore, and the slower first invoke after it."""


@dataclass(frozen=True)
class Workload:
    hourly_requests: tuple[float, ...]
    """Requests in each hour of a day (24 values); a flat daily volume spreads evenly."""
    prompt_tokens: int
    completion_tokens: int
    memory_mb: int = 10240
    architecture: Architecture = "arm64"
    peak_concurrency: float | None = None
    """Generations running at once at the busiest moment; None: the busiest hour's average (Little's law)."""
    snapstart_versions: int = 1
    """Published SnapStart versions kept alive (each pays the snapshot cache all month)."""
    environment_minutes: float = 15.0
    """How long one execution environment serves before a new one restores (idle reclaim, recycling)."""
    vcpus_per_stream: int | None = None
    """vCPUs one generation gets on a CPU instance; None: as many as Lambda gives the memory setting."""

    @classmethod
    def flat(cls, requests_per_day: float, **fields: object) -> Workload:
        return cls(hourly_requests=(requests_per_day / HOURS_PER_DAY,) * HOURS_PER_DAY, **fields)  # type: ignore[arg-type]

    @property
    def requests_per_day(self) -> float:
        return sum(self.hourly_requests)

    @property
    def memory_gb(self) -> float:
        return self.memory_mb / 1024

    def at_volume(self, requests_per_day: float) -> Workload:
        """The same daily shape and burstiness at another volume."""
        factor = requests_per_day / self.requests_per_day
        peak = None if self.peak_concurrency is None else self.peak_concurrency * factor
        return replace(
            self, hourly_requests=tuple(h * factor for h in self.hourly_requests), peak_concurrency=peak
        )


def lambda_vcpus(memory_mb: int) -> int:
    return max(1, min(LAMBDA_MAX_VCPUS, round(memory_mb / LAMBDA_MB_PER_VCPU)))


def streams_of(option: AlwaysOnPrice, workload: Workload) -> int:
    """Generations one unit runs at once at the measured speed."""
    if option.streams is not None:
        return option.streams
    per_stream = workload.vcpus_per_stream or lambda_vcpus(workload.memory_mb)
    return max(1, option.vcpus // per_stream)


def request_seconds(workload: Workload, speed: Speed) -> float:
    """Billed seconds of one warm request (Lambda rounds each invoke up to the millisecond)."""
    ttft = speed.ttft_s
    if speed.ttft_prompt_tokens:
        ttft *= workload.prompt_tokens / speed.ttft_prompt_tokens
    return math.ceil((ttft + workload.completion_tokens / speed.tokens_per_s) * 1000) / 1000


def peak_concurrency(workload: Workload, speed: Speed) -> float:
    busiest = max(workload.hourly_requests) * request_seconds(workload, speed) / 3600
    return max(busiest, workload.peak_concurrency or 0.0)


def restores_per_day(workload: Workload, speed: Speed) -> float:
    """New environments per day: each busy hour runs its share of the peak concurrency, each environment
    restoring every ``environment_minutes``, never more often than requests arrive."""
    peak_hour = max(workload.hourly_requests)
    if peak_hour <= 0:
        return 0.0
    peak = peak_concurrency(workload, speed)
    per_environment = 60 / workload.environment_minutes
    total = 0.0
    for requests in workload.hourly_requests:
        if requests > 0:
            environments = max(1, math.ceil(peak * requests / peak_hour))
            total += min(requests, environments * per_environment)
    return total


@dataclass(frozen=True)
class LambdaCost:
    requests: float
    duration: float
    snapstart_cache: float
    snapstart_restore: float
    gb_s: float
    restores: float

    @property
    def total(self) -> float:
        return self.requests + self.duration + self.snapstart_cache + self.snapstart_restore


def lambda_monthly(prices: Prices, workload: Workload, speed: Speed) -> LambdaCost:
    lam, days = prices.lambda_, prices.days_per_month
    requests = workload.requests_per_day * days
    restores = restores_per_day(workload, speed) * days
    gb = workload.memory_gb
    gb_s = requests * request_seconds(workload, speed) * gb + restores * speed.cold_extra_s * gb
    cache_gb_s = workload.snapstart_versions * gb * prices.seconds_per_month
    return LambdaCost(
        requests=requests / 1e6 * lam.requests.usd_per_million,
        duration=lam.duration(workload.architecture).cost(gb_s),
        snapstart_cache=cache_gb_s * lam.snapstart.cache_usd_per_gb_s,
        snapstart_restore=restores * gb * lam.snapstart.restore_usd_per_gb,
        gb_s=gb_s,
        restores=restores,
    )


@dataclass(frozen=True)
class AlwaysOnCost:
    option: AlwaysOnPrice
    term: Term
    units: int
    total: float
    utilization: float
    """Share of the units' generation capacity (units x streams, all month) the traffic keeps busy."""

    @property
    def label(self) -> str:
        return f"{self.option.name} ({'1-year reserved' if self.term == 'reserved_1y' else 'on-demand'})"


def always_on_monthly(
    prices: Prices, option: AlwaysOnPrice, term: Term, workload: Workload, speed: Speed
) -> AlwaysOnCost:
    """Enough units for the peak concurrency, running all month; at least one."""
    busy_s_per_day = workload.requests_per_day * request_seconds(workload, speed)
    streams_needed = max(peak_concurrency(workload, speed), busy_s_per_day / 86400)
    streams = streams_of(option, workload)
    units = max(1, math.ceil(streams_needed / streams - 1e-9))
    hourly = option.on_demand_usd_per_hour if term == "on_demand" else option.reserved_1y_usd_per_hour
    return AlwaysOnCost(
        option=option,
        term=term,
        units=units,
        total=units * hourly * prices.hours_per_month,
        utilization=busy_s_per_day / (86400 * units * streams),
    )


@dataclass(frozen=True)
class BreakEven:
    requests_per_day: float
    monthly_usd: float
    utilization: float
    """The always-on option's utilization at that volume."""


def break_even(
    prices: Prices, option: AlwaysOnPrice, term: Term, workload: Workload, speed: Speed
) -> BreakEven | None:
    """The lowest daily volume (same daily shape) at which Lambda costs as much as the option, or None when
    Lambda stays cheaper up to ``SEARCH_CEILING`` requests per day."""

    def gap(volume: float) -> float:
        shaped = workload.at_volume(volume)
        return (
            lambda_monthly(prices, shaped, speed).total
            - always_on_monthly(prices, option, term, shaped, speed).total
        )

    low = SEARCH_FLOOR
    if gap(low) >= 0:
        return _at(prices, option, term, workload, speed, low)
    high = low
    while gap(high) < 0:
        low, high = high, high * 2
        if high > SEARCH_CEILING:
            return None
    while high - low > max(0.5, low * 1e-6):
        middle = (low + high) / 2
        low, high = (middle, high) if gap(middle) < 0 else (low, middle)
    return _at(prices, option, term, workload, speed, high)


def _at(
    prices: Prices, option: AlwaysOnPrice, term: Term, workload: Workload, speed: Speed, volume: float
) -> BreakEven:
    shaped = workload.at_volume(volume)
    cost = always_on_monthly(prices, option, term, shaped, speed)
    return BreakEven(requests_per_day=volume, monthly_usd=cost.total, utilization=cost.utilization)


@dataclass(frozen=True)
class Comparison:
    """One option at the workload's volume, with its break-even against Lambda."""

    cost: AlwaysOnCost
    break_even: BreakEven | None


@dataclass(frozen=True)
class Estimate:
    workload: Workload
    speed: Speed
    request_s: float
    lambda_cost: LambdaCost
    options: tuple[Comparison, ...]

    @property
    def cheapest(self) -> Comparison:
        return min(self.options, key=lambda c: c.cost.total)

    def verdict(self) -> str:
        """The plain sentence: stay on Lambda, or move to the cheapest always-on option."""
        volume = f"{self.workload.requests_per_day:,.0f} requests/day"
        best, lam = self.cheapest, self.lambda_cost.total
        if lam <= best.cost.total:
            where = (
                f"it breaks even at {best.break_even.requests_per_day:,.0f} requests/day"
                if best.break_even
                else "Lambda stays cheaper at any volume"
            )
            return (
                f"At {volume}, stay on Lambda: ${lam:,.2f}/month against ${best.cost.total:,.2f} for the "
                f"cheapest always-on option, {best.cost.label}; {where}."
            )
        return (
            f"At {volume}, move to {best.cost.label}: ${best.cost.total:,.2f}/month against ${lam:,.2f} "
            f"on Lambda ({best.cost.utilization:.0%} of its capacity busy)."
        )


def estimate(
    prices: Prices, workload: Workload, speed: Speed, options: tuple[AlwaysOnPrice, ...] | None = None
) -> Estimate:
    chosen = prices.always_on if options is None else options
    return Estimate(
        workload=workload,
        speed=speed,
        request_s=request_seconds(workload, speed),
        lambda_cost=lambda_monthly(prices, workload, speed),
        options=tuple(
            Comparison(
                cost=always_on_monthly(prices, option, term, workload, speed),
                break_even=break_even(prices, option, term, workload, speed),
            )
            for option in chosen
            for term in TERMS
        ),
    )
