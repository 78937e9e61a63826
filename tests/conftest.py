"""Fixtures of every test: one local S3 endpoint (moto server over real HTTP), the packaged model and the
local deployment of the template per session; generation on one thread and one-token warm-ups
(:mod:`tests.support.generation` says why). Modules run longest first (``tests/durations.json``), so the
parallel run ends on short ones."""

from __future__ import annotations

import gc
import json
import os
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.local.s3 import LocalS3
from snapllm_dev.local.session import LocalDeployment
from snapllm_dev.packaged_models import smollm2_path
from tests.support.generation import TEST_THREADS, TEST_WARMUP_TOKENS
from tests.support.paths import TEMPLATE

os.environ.setdefault("SNAPLLM_THREADS", TEST_THREADS)
os.environ.setdefault("SNAPLLM_WARMUP_TOKENS", TEST_WARMUP_TOKENS)

#: Each module's seconds in a full run (scripts/test_durations.py writes it from CI's log).
DURATIONS = Path(__file__).with_name("durations.json")


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap() -> None:
    """What is alive when a module starts (imports, the session's fixtures) is left out of every later
    garbage collection: a worker holds hundreds of thousands of such objects, and a full collection over them
    takes 0.3 s, which the leak checks run twice per model load. What a module makes is younger, so its
    collections still find it."""
    gc.collect()
    gc.freeze()


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # pytest-xdist (``--dist loadgroup``) gives each group to one worker: a module is a group of its own,
    # unless it names one (``pytest.mark.xdist_group``) to share a server with the other modules of it.
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_module(item)))
    # The groups go out in this order (the Makefile turns xdist's own reordering off): the longest first,
    # by the sum of its modules' times, so no worker starts a long one while the others finish. The sort
    # is stable, so each module's tests keep their order; a module not yet timed counts as a median one.
    seconds = json.loads(DURATIONS.read_text())
    unknown = statistics.median(seconds.values())
    group = {item: item.get_closest_marker("xdist_group").args[0] for item in items}
    modules: dict[str, set[str]] = {}
    for item in items:
        modules.setdefault(group[item], set()).add(_module(item))
    total = {name: sum(seconds.get(module, unknown) for module in names) for name, names in modules.items()}
    items.sort(key=lambda item: (-total[group[item]], group[item]))


@pytest.fixture(scope="session")
def model_path() -> Path:
    return smollm2_path()


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    with LocalS3.start() as s3:
        yield s3


@pytest.fixture(scope="session")
def deployment(local_s3: LocalS3, model_path: Path) -> Iterator[LocalDeployment]:
    deployment = LocalDeployment.start(sam.load(TEMPLATE), model_path=model_path, s3=local_s3)
    yield deployment
