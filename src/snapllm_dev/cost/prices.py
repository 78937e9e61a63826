"""The price data file (``prices.toml``, shipped with the package) as typed, validated objects."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Architecture = Literal["arm64", "x86_64"]


class Sourced(BaseModel):
    """Where and when a price was read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    region: str
    date: str
    source: str


class Tier(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    up_to_gb_s: float | None = None
    usd_per_gb_s: float


class DurationPrice(Sourced):
    tiers: tuple[Tier, ...] = Field(min_length=1)

    def cost(self, gb_s: float) -> float:
        """Dollars for ``gb_s`` GB-seconds in one month, through the tiers in order."""
        dollars, below = 0.0, 0.0
        for tier in self.tiers:
            top = gb_s if tier.up_to_gb_s is None else min(gb_s, tier.up_to_gb_s)
            if top > below:
                dollars += (top - below) * tier.usd_per_gb_s
                below = top
        return dollars

    @property
    def first_tier_usd_per_gb_s(self) -> float:
        return self.tiers[0].usd_per_gb_s


class RequestPrice(Sourced):
    usd_per_million: float


class SnapStartPrice(Sourced):
    cache_usd_per_gb_s: float
    restore_usd_per_gb: float


class LambdaPrices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: RequestPrice
    arm64: DurationPrice
    x86_64: DurationPrice
    snapstart: SnapStartPrice

    def duration(self, architecture: Architecture) -> DurationPrice:
        return self.arm64 if architecture == "arm64" else self.x86_64


class AlwaysOnPrice(Sourced):
    """One instance type or task size, priced per hour on demand and reserved for a year."""

    name: str
    kind: str
    vcpus: int = Field(ge=1)
    streams: int | None = Field(default=None, ge=1)
    """Generations at once for an accelerator; None: a CPU option, whose streams come from its vCPUs."""
    on_demand_usd_per_hour: float
    reserved_1y_usd_per_hour: float


class Prices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    hours_per_month: float
    lambda_: LambdaPrices = Field(alias="lambda")
    always_on: tuple[AlwaysOnPrice, ...]

    @property
    def seconds_per_month(self) -> float:
        return self.hours_per_month * 3600

    @property
    def days_per_month(self) -> float:
        return self.hours_per_month / 24

    def option(self, name: str) -> AlwaysOnPrice:
        for option in self.always_on:
            if option.name == name:
                return option
        known = ", ".join(o.name for o in self.always_on)
        raise KeyError(f"no always-on option {name!r} in the price file (known: {known})")


def load(path: Path | None = None) -> Prices:
    """The packaged price file, or ``path``."""
    text = (
        path.read_text()
        if path is not None
        else resources.files("snapllm_dev.cost").joinpath("prices.toml").read_text()
    )
    return Prices.model_validate(tomllib.loads(text))
