"""Fault a restored environment's memory in before the first request needs it (the after-restore hook).

    stats = prefault("weights", threads=2)   # the model's memfd mapping
    stats.bytes, stats.seconds, stats.advice

The modes (``SNAPLLM_PREFAULT``), its time budget, and what each mode costs and saves: docs/benchmarks.md.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import errno
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy

from snapllm.engine.settings import PrefaultMode

PREFAULT_MODES: tuple[PrefaultMode, ...] = get_args(PrefaultMode)

MADV_WILLNEED = 3
MADV_POPULATE_READ = 22  # Linux 5.14
MADV_POPULATE_WRITE = 23  # Linux 5.14
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
SLICE_BYTES = 64 * 1024 * 1024
#: The name the loader gives the model's memfd (``os.memfd_create("snapllm:<name>")``); the kernel shows
#: its mappings as ``/memfd:snapllm:<name> (deleted)``.
MODEL_MEMFD_PREFIX = "/memfd:snapllm:"
_SKIPPED_PATHS = ("[vvar]", "[vvar_vclock]", "[vsyscall]", "[vdso]")

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.madvise.restype = ctypes.c_int


@dataclass(frozen=True)
class MemoryRange:
    """One line of ``/proc/self/maps``."""

    start: int
    end: int
    permissions: str  # "r-xp", "rw-s"...
    path: str  # "" for anonymous memory

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def readable(self) -> bool:
        return self.permissions[0] == "r"

    @property
    def private_writable(self) -> bool:
        return self.permissions[1] == "w" and self.permissions[3] == "p"

    @property
    def is_model(self) -> bool:
        return self.path.startswith(MODEL_MEMFD_PREFIX)


@dataclass(frozen=True)
class PrefaultStats:
    """What a prefault did: the mode, the bytes faulted in, time taken and the advice the kernel took."""

    mode: PrefaultMode
    bytes: int
    seconds: float
    advice: str  # "populate", "willneed" or "" (mode none)
    failed_ranges: int = 0
    skipped_bytes: int = 0  # left when the time budget ran out

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "bytes": self.bytes,
            "ms": round(self.seconds * 1000, 2),
            "advice": self.advice,
            "failed_ranges": self.failed_ranges,
            "skipped_bytes": self.skipped_bytes,
        }


def memory_ranges(maps: Path = Path("/proc/self/maps")) -> list[MemoryRange]:
    """This process's mappings."""
    ranges = []
    for line in maps.read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(value, 16) for value in fields[0].split("-"))
        path = fields[5] if len(fields) == 6 else ""
        ranges.append(MemoryRange(start, end, fields[1], path))
    return ranges


def resident_bytes_by_range(smaps: Path = Path("/proc/self/smaps")) -> dict[int, int]:
    """Resident bytes of each mapping, by its start address (``Rss`` in ``/proc/self/smaps``)."""
    resident: dict[int, int] = {}
    start = None
    for line in smaps.read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            start = int(head.split("-")[0], 16)
        elif head == "Rss:" and start is not None:
            resident[start] = int(line.split()[1]) * 1024
    return resident


def _madvise(start: int, length: int, advice: int) -> int:
    """0, or the errno of a refused ``madvise``."""
    if _libc.madvise(start, length, advice) == 0:
        return 0
    return ctypes.get_errno()


class _IoVec(ctypes.Structure):
    _fields_ = (("base", ctypes.c_void_p), ("length", ctypes.c_size_t))


_libc.process_vm_readv.argtypes = (
    ctypes.c_int,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.POINTER(_IoVec),
    ctypes.c_ulong,
    ctypes.c_ulong,
)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_PAGES_PER_READ = 1024  # IOV_MAX


def _touch(start: int, length: int) -> bool:
    """Read one byte of every page, through ``process_vm_readv`` on this process: the kernel reads each page
    (so a hypervisor loads one it has not restored yet), and a range unmapped meanwhile by another thread
    ends the read with an error instead of a segmentation fault. False if the kernel refused the call."""
    pages = (length + PAGE_SIZE - 1) // PAGE_SIZE
    # The remote iovecs, (address, 1) per page, built as one array of machine words rather than in a loop.
    words = array.array("Q", bytes(ctypes.sizeof(_IoVec) * pages))
    words[0::2] = array.array("Q", range(start, start + pages * PAGE_SIZE, PAGE_SIZE))
    words[1::2] = array.array("Q", [1]) * pages
    remote_base = words.buffer_info()[0]
    scratch = ctypes.create_string_buffer(_PAGES_PER_READ)
    pid = os.getpid()
    for first in range(0, pages, _PAGES_PER_READ):
        count = min(_PAGES_PER_READ, pages - first)
        local = _IoVec(ctypes.addressof(scratch), count)
        remote = ctypes.cast(remote_base + ctypes.sizeof(_IoVec) * first, ctypes.POINTER(_IoVec))
        if _libc.process_vm_readv(pid, ctypes.byref(local), 1, remote, count, 0) < 0:
            return False
    return True


def present_runs(
    start: int, length: int, pagemap: Path = Path("/proc/self/pagemap")
) -> list[tuple[int, int]]:
    """The ``(address, length)`` runs of pages in ``[start, start + length)`` that are present in this
    process (bit 63 of each ``/proc/self/pagemap`` entry): the pages that hold data."""
    pages = length // PAGE_SIZE
    with pagemap.open("rb") as entries:
        entries.seek(start // PAGE_SIZE * 8)
        present = (numpy.frombuffer(entries.read(pages * 8), dtype=numpy.uint64) >> 63).astype(numpy.int8)
    edges = numpy.flatnonzero(numpy.diff(numpy.concatenate(([0], present, [0]))))
    return [
        (start + int(first) * PAGE_SIZE, int(last - first) * PAGE_SIZE)
        for first, last in zip(edges[0::2], edges[1::2], strict=True)
    ]


def _slices(ranges: Iterable[MemoryRange]) -> Iterator[tuple[MemoryRange, int, int]]:
    """Each range in slices of at most SLICE_BYTES; for private memory, only its present pages (populating
    the rest would allocate memory that holds nothing)."""
    for memory in ranges:
        runs = [(memory.start, memory.size)] if memory.is_model else present_runs(memory.start, memory.size)
        for run_start, run_length in runs:
            for start in range(run_start, run_start + run_length, SLICE_BYTES):
                yield memory, start, min(SLICE_BYTES, run_start + run_length - start)


class _Advisor:
    """Applies the populate advice, falling back to ``MADV_WILLNEED`` on a kernel without it (EINVAL), until
    the deadline (``time.monotonic()``) passes: slices left then are counted, not faulted in."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.populate = True
        self.failed = 0
        self.skipped_bytes = 0
        self.advised_bytes = 0

    def _advise(self, start: int, length: int, advice: int) -> bool:
        if self.populate:
            error = _madvise(start, length, advice)
            if error != errno.EINVAL:
                return error == 0
            self.populate = False
        return _madvise(start, length, MADV_WILLNEED) == 0

    def apply(self, memory: MemoryRange, start: int, length: int) -> None:
        if time.monotonic() >= self.deadline:
            self.skipped_bytes += length
            return
        # Populating maps every page in this process (and, for private memory, makes it this process's own
        # copy); reading each page makes the memory under it present, which populating alone does not do
        # for a page whose mapping a snapshot restored but whose contents it has not loaded yet.
        advice = MADV_POPULATE_READ if memory.is_model else MADV_POPULATE_WRITE
        if not (self._advise(start, length, advice) and _touch(start, length)):
            self.failed += 1
        else:
            self.advised_bytes += length


def ranges_for(mode: PrefaultMode, ranges: list[MemoryRange] | None = None) -> list[MemoryRange]:
    """The mappings a mode faults in."""
    if mode == "none":
        return []
    ranges = memory_ranges() if ranges is None else ranges
    chosen = [memory for memory in ranges if memory.is_model and memory.readable]
    if mode == "all":
        resident = resident_bytes_by_range()
        chosen += [
            memory
            for memory in ranges
            if not memory.is_model
            and memory.private_writable
            and memory.readable
            and memory.path not in _SKIPPED_PATHS
            and resident.get(memory.start, 0) > 0
        ]
    return chosen


def prefault(mode: PrefaultMode, *, threads: int = 1, budget_s: float = 5.0) -> PrefaultStats:
    """Fault in the memory ``mode`` names (see the module docstring), the model's mapping first, for at most
    about ``budget_s`` (the slice under way finishes); never raises for a refused range."""
    started = time.perf_counter()
    chosen = ranges_for(mode)
    if not chosen:
        return PrefaultStats(mode, 0, time.perf_counter() - started, "")
    advisor = _Advisor(deadline=time.monotonic() + budget_s)
    try:
        slices = list(_slices(chosen))
    except OSError:  # no /proc/self/pagemap: the weights alone
        slices = list(_slices(memory for memory in chosen if memory.is_model))
    if threads > 1 and len(slices) > 1:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="snapllm-prefault") as pool:
            list(pool.map(lambda item: advisor.apply(*item), slices))
    else:
        for item in slices:
            advisor.apply(*item)
    return PrefaultStats(
        mode,
        advisor.advised_bytes,
        time.perf_counter() - started,
        "populate" if advisor.populate else "willneed",
        advisor.failed,
        advisor.skipped_bytes,
    )
