"""The PNG: monthly cost against requests per day, one line per option, break-even points marked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from snapllm_dev.cost.model import Estimate, always_on_monthly, lambda_monthly
from snapllm_dev.cost.prices import Prices

POINTS = 240


def volume_range(estimate: Estimate) -> tuple[float, float]:
    """From well below the workload to past the farthest break-even, in whole decades."""
    marks = [estimate.workload.requests_per_day]
    marks += [c.break_even.requests_per_day for c in estimate.options if c.break_even]
    return 10 ** math.floor(math.log10(min(marks)) - 1), 10 ** math.ceil(math.log10(max(marks)) + 0.3)


def write(prices: Prices, estimate: Estimate, path: Path) -> Path:
    low, high = volume_range(estimate)
    volumes = np.geomspace(low, high, POINTS)
    workload, speed = estimate.workload, estimate.speed
    figure = Figure(figsize=(11, 6.5), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    lam = [lambda_monthly(prices, workload.at_volume(v), speed).total for v in volumes]
    axes.plot(
        volumes,
        lam,
        color="black",
        linewidth=2.6,
        label=f"Lambda {workload.architecture}, {workload.memory_mb:,} MB, SnapStart",
    )
    colors = {
        option.name: f"C{i}"
        for i, option in enumerate(dict.fromkeys(c.cost.option for c in estimate.options))
    }
    for comparison in estimate.options:
        option, term = comparison.cost.option, comparison.cost.term
        costs = [always_on_monthly(prices, option, term, workload.at_volume(v), speed).total for v in volumes]
        style = "-" if term == "on_demand" else "--"
        point = comparison.break_even
        # The break-even goes in the legend: labels next to the dots collide where options are close.
        where = (
            f"even at {point.requests_per_day:,.0f}/day, {point.utilization:.0%} busy"
            if point
            else "never even"
        )
        label = f"{comparison.cost.label}: {where}"
        axes.plot(volumes, costs, style, color=colors[option.name], linewidth=1.6, label=label)
        if point:
            marker = "o" if term == "on_demand" else "D"
            axes.plot(
                point.requests_per_day,
                point.monthly_usd,
                marker,
                color=colors[option.name],
                markersize=8,
                markeredgecolor="black",
                zorder=5,
            )
    axes.axvline(workload.requests_per_day, color="grey", linestyle=":", linewidth=1.2)
    axes.annotate(
        "your volume",
        (workload.requests_per_day, 0.02),
        xycoords=("data", "axes fraction"),
        rotation=90,
        fontsize=8,
        color="grey",
        xytext=(3, 0),
        textcoords="offset points",
    )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("requests per day")
    axes.set_ylabel("monthly cost (USD, us-east-1)")
    axes.set_title(
        f"{workload.prompt_tokens} prompt + {workload.completion_tokens} completion tokens per request, "
        f"{estimate.request_s:.2f} s each at {speed.tokens_per_s:.0f} tokens/s; "
        "markers: break-even with Lambda",
        fontsize=10,
    )
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    figure.savefig(path)
    return path
