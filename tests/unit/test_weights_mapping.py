"""Which model files llama.cpp maps rather than reads: a memfd is read while repacking (closing it then
frees the only other copy); a file on a filesystem, or a link to one, is mapped."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from snapllm.engine.loaded import maps_weights
from snapllm.engine.settings import EngineSettings

REPACKING = EngineSettings(repack_weights=True)
NOT_REPACKING = EngineSettings(repack_weights=False)


@pytest.fixture
def memfd() -> Iterator[str]:
    fd = os.memfd_create("snapllm:mapping-test", os.MFD_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def test_a_memfd_is_read_while_repacking_and_mapped_otherwise(memfd):
    assert maps_weights(memfd, REPACKING) is False
    assert maps_weights(memfd, NOT_REPACKING) is True


def test_a_file_on_a_filesystem_is_mapped_either_way(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    link = tmp_path / "link.gguf"
    link.symlink_to(model)
    with model.open("rb") as opened:
        for path in (str(model), str(link), f"/proc/self/fd/{opened.fileno()}"):
            assert maps_weights(path, REPACKING) is True, path
            assert maps_weights(path, NOT_REPACKING) is True, path
