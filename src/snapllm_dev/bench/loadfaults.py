"""``snapllm bench coldstart --faults``: what transient network faults cost the S3 -> memfd load.

Each round loads the model directly, cleanly through the fault proxy and under each transient fault (a
reset, a clean close, ``503 SlowDown``, a stall); docs/benchmarks.md says how, and what they cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapllm.engine.loader import S3ModelLoader
from snapllm.engine.settings import LoaderSettings, MiB, ModelSource
from snapllm.inference.settings import LoaderEnvironment
from snapllm_dev import sam
from snapllm_dev.local.faults import FaultProxy, parse_fault
from snapllm_dev.local.kinds import model_function
from snapllm_dev.local.report import seconds, table
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment

STALL_READ_TIMEOUT_S = 1.0
DIRECT = "direct (no proxy)"
CLEAN = "clean (through the proxy)"


def transient_faults(settings: LoaderSettings) -> list[str]:
    """The fault specs measured, with offsets that fall inside a body of the configured part size."""
    offset_mb = max(1, min(30, settings.part_size // MiB // 2))
    return [
        f"reset@{offset_mb}MB",
        f"close@{offset_mb}MB",
        "status=503:SlowDown:every=2",
        f"stall@{offset_mb}MB",
    ]


@dataclass
class _Case:
    seconds: list[float] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    fired: list[int] = field(default_factory=list)


def measure(deployment: LocalDeployment, settings: LoaderSettings, rounds: int) -> dict[str, Any]:
    """Median load time, ratio to the clean load, retries and faults fired, per case."""
    settings = settings.model_copy(update={"read_timeout_s": STALL_READ_TIMEOUT_S})
    source = ModelSource(
        bucket=LOCAL_MODEL_BUCKET, key=deployment.model_key, sha256=deployment.model_sha256, name="bench"
    )
    config = S3ModelLoader.client_config(settings)
    specs = transient_faults(settings)
    cases = {name: _Case() for name in (DIRECT, CLEAN, *specs)}
    for _ in range(rounds):
        for name, case in cases.items():
            if name == DIRECT:
                client = deployment.s3.client(config=config)
                elapsed, retries = _load(S3ModelLoader(client, settings), source)
                fired = 0
            else:
                faults = [] if name == CLEAN else [parse_fault(name)]
                with FaultProxy(deployment.s3.endpoint_url, faults) as proxy:
                    client = deployment.s3.client(endpoint_url=proxy.url, config=config)
                    elapsed, retries = _load(S3ModelLoader(client, settings), source)
                fired = len(proxy.fired)
            client.close()
            case.seconds.append(elapsed)
            case.retries.append(retries)
            case.fired.append(fired)
    clean = statistics.median(cases[CLEAN].seconds)
    return {
        "cases": {
            name: {
                "median_s": statistics.median(case.seconds),
                "ratio_to_clean": statistics.median(case.seconds) / clean,
                "retries": max(case.retries),
                "faults_fired": min(case.fired),
            }
            for name, case in cases.items()
        },
        "settings": {
            "part_size": settings.part_size,
            "concurrency": settings.concurrency,
            "max_attempts": settings.max_attempts,
            "read_timeout_s": settings.read_timeout_s,
        },
        "rounds": rounds,
    }


def _load(loader: S3ModelLoader, source: ModelSource) -> tuple[float, int]:
    started = time.perf_counter()
    # The source names its SHA-256: a load whose bytes differ raises instead of being timed.
    with loader.load(source) as model:
        return time.perf_counter() - started, model.stats.retries


def render(result: dict[str, Any]) -> str:
    rows = [
        (
            name,
            f"{seconds(case['median_s']):>9}  ratio {case['ratio_to_clean']:5.2f}  "
            f"retries {case['retries']}  fired {case['faults_fired']}",
        )
        for name, case in result["cases"].items()
    ]
    settings = result["settings"]
    title = (
        f"S3 -> memfd under transient faults (medians of {result['rounds']} rounds; "
        f"{settings['part_size'] // MiB} MiB parts x {settings['concurrency']}, "
        f"read timeout {settings['read_timeout_s']:g} s)"
    )
    return table(rows, title=title)


def run(args: argparse.Namespace, model: Path) -> int:
    with LocalDeployment.start(sam.load(args.template), model_path=model) as deployment:
        with deployment.function(model_function(deployment.template).name) as function:
            settings = LoaderEnvironment.from_env(function.environment).loader_settings()
        result = measure(deployment, settings, args.rounds)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0
