"""The engine's persistent thread pool, with the real model on two threads: the same tokens as llama.cpp's
per-decode threads, no CPU burnt while idle, and a forked process (how the local restore runs) that still
generates."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling

# Two threads, so the pool has a worker besides the calling thread; few tokens, since two threads on a
# busy machine decode slowly without the pool.
THREADS = 2
TOKENS = 4


def _load(model_path: Path, **settings: object) -> Engine:
    return Engine.load(str(model_path), EngineSettings(threads=THREADS, **settings), model_name="pool")


@pytest.fixture(scope="module")
def pooled(model_path: Path) -> Iterator[Engine]:
    engine = _load(model_path)
    yield engine
    engine.close()


def _counting(engine: Engine) -> EngineRequest:
    tokens = engine.tokenize("Count from one to twenty: 1, 2, 3,", add_bos=True)
    return EngineRequest(tuple(tokens), Sampling(0.0, 1.0, seed=1), max_tokens=TOKENS)


def _worker_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_the_pool_generates_the_tokens_of_per_decode_threads(model_path, pooled):
    assert pooled.thread_pool is not None and pooled.thread_pool.threads == THREADS
    unpooled = _load(model_path, thread_pool=False)
    assert unpooled.thread_pool is None
    expected = unpooled.generate(_counting(unpooled))
    answer = pooled.generate(_counting(pooled))
    assert answer.completion_tokens == expected.completion_tokens == TOKENS
    assert answer.text == expected.text


def test_an_idle_pool_sleeps_and_close_joins_its_threads(model_path):
    tasks = _worker_threads()
    engine = _load(model_path)
    assert _worker_threads() == tasks + THREADS - 1  # the workers; the calling thread is the pool's first
    engine.generate(_counting(engine))
    # Workers left polling after a request would burn 0.1-0.3 s of CPU each here (measured without the
    # pause); paused, the process is asleep.
    started = time.process_time()
    time.sleep(2.0)
    assert time.process_time() - started < 0.02
    engine.close()
    assert _worker_threads() == tasks
    engine.close()  # twice is harmless


def test_a_stopped_pool_is_joined_after_the_next_request_and_started_again(model_path):
    # The runtime stops it before its warm-up, so the snapshot holds one thread (the local stack's restore
    # forks), and starts it in the restore's hook. ggml's CPU backend lets go of a pool at its next decode.
    tasks = _worker_threads()
    engine = _load(model_path)
    expected = engine.generate(_counting(engine)).text
    engine.stop_threads()
    assert engine.generate(_counting(engine)).text == expected  # on threads of its own
    assert _worker_threads() == tasks
    assert engine.generate(_counting(engine)).text == expected  # still stopped
    assert _worker_threads() == tasks
    engine.start_threads()
    assert _worker_threads() == tasks + THREADS - 1
    assert engine.generate(_counting(engine)).text == expected
    engine.close()
    assert _worker_threads() == tasks


def test_a_forked_process_generates_on_a_pool_of_its_own(pooled):
    # fork() copies only the calling thread: the child must not wait on the parent's workers.
    expected = pooled.generate(_counting(pooled)).text
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            text = pooled.generate(_counting(pooled)).text
            os.write(writer, b"same" if text == expected else text.encode())
        finally:
            os._exit(0)
    os.close(writer)
    _, status = os.waitpid(child, 0)
    with os.fdopen(reader, "rb") as answer:
        assert answer.read() == b"same"
    assert status == 0
    assert pooled.generate(_counting(pooled)).text == expected  # the parent's pool still works
