"""Shared fixtures: one local S3 endpoint (moto server over real HTTP) and the packaged model per session.

Generation in tests runs with one thread: ggml's worker threads spin-wait on each other, and on a machine
whose cores are busy with anything else that collapses throughput by orders of magnitude. One thread keeps
the suite's duration independent of what else runs beside it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.local.s3 import LocalS3
from snapllm_dev.local.session import LocalDeployment
from snapllm_dev.packaged_models import default_model_path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "template.yaml"
TEST_THREADS = "1"

# Greedy decoding of this prompt counts on for well over 512 tokens without an end-of-sequence token, so a
# test that needs generation to still be running when a deadline passes does not depend on sampling luck.
LONG_GENERATION = {"prompt": "Count from one to a thousand: 1, 2, 3, 4, 5,", "temperature": 0.0}

os.environ.setdefault("SNAPLLM_THREADS", TEST_THREADS)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    with LocalS3.start() as s3:
        yield s3


@pytest.fixture(scope="session")
def deployment(local_s3: LocalS3, model_path: Path) -> Iterator[LocalDeployment]:
    deployment = LocalDeployment.start(sam.load(TEMPLATE), model_path=model_path, s3=local_s3)
    yield deployment
