"""Processes that need the same cache entry at once make it once, and each finds it whole."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from snapllm_dev.cache import cache_dir, filling


def _make_entry(cache: str, entry: Path, log: Path) -> None:
    """What a cache user does: check for the entry under its lock, and make it (slowly) if missing."""
    os.environ["SNAPLLM_CACHE_DIR"] = cache
    with filling("models/example"):
        if not entry.is_file():
            partial = entry.with_suffix(f".partial-{os.getpid()}")
            partial.write_text("half")
            time.sleep(0.5)  # another process that did not wait would find the entry missing, or half made
            partial.write_text("whole")
            partial.rename(entry)
            with log.open("a") as made:
                made.write(f"{os.getpid()}\n")
    assert entry.read_text() == "whole"


def test_processes_that_need_one_entry_at_once_make_it_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    entry, log = tmp_path / "entry", tmp_path / "made"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_make_entry, args=(str(cache), entry, log)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert len(log.read_text().split()) == 1
    monkeypatch.setenv("SNAPLLM_CACHE_DIR", str(cache))
    assert (cache_dir() / ".locks" / "models" / "example.lock").is_file()


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"SNAPLLM_CACHE_DIR": "/srv/cache", "XDG_CACHE_HOME": "/xdg"}, "/srv/cache"),
        ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/snapllm"),
    ],
)
def test_the_cache_folder_follows_the_environment(monkeypatch, environment, expected):
    monkeypatch.delenv("SNAPLLM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert cache_dir() == Path(expected)
