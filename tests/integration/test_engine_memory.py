"""How many copies of the weights a loaded model keeps: loaded from a memfd as the inference function loads
it (Gemma 3's Q4_K weights, some of which llama.cpp repacks on x86), with repacking on (the default: the
memfd is read, then closed) and off (the memfd is mapped); and from a file on a filesystem (mapped)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import llama_cpp.llama_cpp as low_level
import pytest

from snapllm.engine.model import Engine
from snapllm.engine.prefault import MODEL_MEMFD_PREFIX
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling
from snapllm_dev.packaged_models import gemma3_270m_path

MiB = 1024 * 1024


def _memory() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssShmem"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _memfd_mapped() -> bool:
    return MODEL_MEMFD_PREFIX in Path("/proc/self/maps").read_text()


def _answer(engine: Engine) -> str:
    """A few greedy tokens of one fixed prompt."""
    tokens = engine.tokenize("Count from one to twenty: 1, 2, 3,", add_bos=True)
    return engine.generate(EngineRequest(tuple(tokens), Sampling(0.0, 1.0, seed=1), max_tokens=8)).text


def _load_from_memfd(path: Path, settings: EngineSettings) -> tuple[str, int]:
    """Load as the runtime does (a memfd, closed after the load), generate a few tokens; what it answered
    and how much memory (private plus shared) the process gained and still holds."""
    gc.collect()
    before = sum(_memory().values())
    fd = os.memfd_create("snapllm:memory-test", os.MFD_CLOEXEC)
    try:
        os.write(fd, path.read_bytes())
        engine = Engine.load(f"/proc/self/fd/{fd}", settings, model_name="gemma")
    finally:
        os.close(fd)
    answer = _answer(engine)
    mapped = _memfd_mapped()
    gained = sum(_memory().values()) - before
    engine.close()
    del engine
    gc.collect()
    return answer + (" [memfd mapped]" if mapped else ""), gained


@pytest.fixture(scope="module")
def gemma() -> Path:
    return gemma3_270m_path()


def test_repacked_weights_are_held_once_and_answer_as_mapped_ones(gemma):
    size = gemma.stat().st_size
    mapped_answer, mapped = _load_from_memfd(gemma, EngineSettings(threads=1, repack_weights=False))
    read_answer, read = _load_from_memfd(gemma, EngineSettings(threads=1))
    assert mapped_answer.endswith("[memfd mapped]")  # off: the memfd's pages are the weights
    # On: the file was read into llama.cpp's buffers and, once closed, freed: no mapping keeps it.
    assert read_answer == mapped_answer.removesuffix(" [memfd mapped]")
    # A second copy of the weights would add the file's size again (240 MiB); the repacked buffers and
    # the rest differ from the mapped load by a few MiB, and by up to ~17 MiB with other tests beside it.
    assert mapped > size * 0.8
    assert read < mapped + size * 0.25, (read / MiB, mapped / MiB)


def test_a_file_on_a_filesystem_is_mapped_while_repacking_and_answers_as_the_read_memfd(gemma):
    read_answer, _ = _load_from_memfd(gemma, EngineSettings(threads=1))
    engine = Engine.load(str(gemma), EngineSettings(threads=1), model_name="gemma")
    try:
        assert engine.llama.model_params.use_extra_bufts is True
        assert engine.llama.model_params.load_mode == low_level.LLAMA_LOAD_MODE_MMAP
        assert str(gemma) in Path("/proc/self/maps").read_text()
        assert _answer(engine) == read_answer  # the same kernels, over the same bytes
    finally:
        engine.close()
