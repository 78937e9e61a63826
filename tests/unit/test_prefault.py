"""The after-restore prefault (snapllm.engine.prefault) on real mappings of this process."""

from __future__ import annotations

import ctypes
import mmap
import os
import resource

import pytest

from snapllm.engine.prefault import PAGE_SIZE, _touch, memory_ranges, prefault, present_runs, ranges_for

SIZE = 16 * 1024 * 1024


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _address(view: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(view)
    address = ctypes.addressof(anchor)
    del anchor  # the buffer export would keep the mapping from being closed
    return address


def _read_every_page(view: mmap.mmap) -> int:
    return sum(view[offset] for offset in range(0, len(view), PAGE_SIZE))


@pytest.fixture
def model_mapping():
    """A memfd named as the loader names the model's, filled and mapped read-only as llama.cpp maps it."""
    fd = os.memfd_create("snapllm:prefault-test")
    os.write(fd, b"\x01" * SIZE)
    view = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
    os.close(fd)
    yield view
    view.close()


def test_the_model_mapping_is_found_by_its_memfd_name(model_mapping):
    found = [memory for memory in ranges_for("weights") if memory.size == SIZE]
    assert len(found) == 1 and found[0].path.startswith("/memfd:snapllm:prefault-test")
    assert ranges_for("none") == []


def test_weights_prefault_maps_every_page_before_it_is_read(model_mapping, tmp_path):
    stats = prefault("weights", threads=2)
    assert stats.bytes >= SIZE and stats.advice == "populate" and stats.failed_ranges == 0
    before = _minor_faults()
    assert _read_every_page(model_mapping) == SIZE // PAGE_SIZE
    assert _minor_faults() - before < 16  # the pages were mapped already (a few faults for the loop itself)


def test_without_prefault_the_first_read_faults(tmp_path):
    fd = os.memfd_create("snapllm:cold")
    os.write(fd, b"\x01" * SIZE)
    view = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
    os.close(fd)
    before = _minor_faults()
    _read_every_page(view)
    # The kernel maps up to 16 pages around each fault of a shared mapping: at least 1/16 of them.
    assert _minor_faults() - before >= SIZE // PAGE_SIZE // 16
    view.close()


def test_all_includes_private_memory_that_holds_data(model_mapping):
    heap = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    heap.write(b"\x02" * SIZE)
    address = _address(heap)
    assert any(memory.start <= address < memory.end for memory in ranges_for("all"))
    assert not any(memory.start <= address < memory.end for memory in ranges_for("weights"))
    assert prefault("all", threads=1).bytes > prefault("weights", threads=1).bytes
    heap.close()


def test_the_budget_bounds_the_work_and_counts_what_it_left(model_mapping):
    stats = prefault("weights", threads=1, budget_s=0.0)
    assert stats.bytes == 0 and stats.skipped_bytes >= SIZE


def test_only_the_pages_that_hold_data_are_populated():
    heap = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    heap[: SIZE // 4] = b"\x03" * (SIZE // 4)  # the first quarter holds data, the rest was never touched
    address = _address(heap)
    runs = [(start, length) for start, length in present_runs(address, SIZE)]
    assert runs == [(address, SIZE // 4)]
    heap.close()


def test_a_range_unmapped_meanwhile_fails_cleanly_instead_of_crashing():
    gone = mmap.mmap(-1, SIZE)
    address = _address(gone)
    gone.close()
    assert not any(memory.start <= address < memory.end for memory in memory_ranges())
    assert _touch(address, SIZE) is False
