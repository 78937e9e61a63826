"""Where a side's time per generated token goes: inside llama.cpp's ``llama_context::decode``, or outside it.

    with DecodeTracer([libllama, server_binary]) as tracer:
        result, calls = tracer.calls(lambda: side(prompt, 64))
    calls.split()   # DecodeSplit(inside_ms=19.3, outside_us=248.0, tokens=63)

Uprobes on the decode's entry and return; root and tracefs. docs/benchmarks.md says why.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import statistics
import subprocess
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile

#: The function every decode of every side goes through (llama_decode's batch is converted to this one).
DECODE_SYMBOL = "_ZN13llama_context6decodeERK15llama_batch_ext"
TRACEFS = Path("/sys/kernel/tracing")
#: The start of the probes' event group (and tracefs instance) names; the process id follows.
GROUP = "snapllm_bench"
#: One probe's line in a trace recorded with the ``record-tgid`` option: the process id (the thread group's)
#: in parentheses, then the CPU, flags, the timestamp in seconds and the probe's name.
_EVENT = re.compile(r"\(\s*(?P<process>\d+)\)\s+\[\d+\]\s+\S+\s+(?P<time>\d+\.\d+): (?P<kind>in|out)_\d+:")

T = TypeVar("T")


class ProbeUnavailable(Exception):
    """The probes cannot be set here; the message says why and what would let them."""


def symbol_offset(binary: Path, symbol: str) -> int:
    """The file offset of ``symbol``'s code in the ELF file ``binary`` (what a uprobe is placed at)."""
    with binary.open("rb") as stream:
        elf = ELFFile(stream)
        address = None
        for name in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(name)
            found = table.get_symbol_by_name(symbol) if table is not None else None
            if found:
                address = int(found[0]["st_value"])
                break
        if not address:
            raise ProbeUnavailable(f"{binary} has no symbol {symbol}")
        for segment in elf.iter_segments(type="PT_LOAD"):
            start = int(segment["p_vaddr"])
            if segment["p_flags"] & P_FLAGS.PF_X and start <= address < start + int(segment["p_filesz"]):
                return address - start + int(segment["p_offset"])
    raise ProbeUnavailable(f"{symbol} is not in an executable segment of {binary}")


@dataclass(frozen=True)
class DecodeSplit:
    """A request's generated tokens: the median time in llama.cpp's decode for one, and the median time
    between two decodes (the program's own work for a token), over ``tokens`` decodes."""

    inside_ms: float
    outside_us: float
    tokens: int


@dataclass(frozen=True)
class DecodeCalls:
    """The kernel's timestamps (seconds) of each decode's entry and return, in order."""

    entries: tuple[float, ...]
    returns: tuple[float, ...]

    @classmethod
    def parse(cls, trace: str, processes: Collection[int] | None = None) -> DecodeCalls:
        """The decodes in ``trace`` made by ``processes`` (by any process where None): a probe on a file
        fires in every process that runs it."""
        entries: list[float] = []
        returns: list[float] = []
        for match in _EVENT.finditer(trace):
            if processes is None or int(match["process"]) in processes:
                (entries if match["kind"] == "in" else returns).append(float(match["time"]))
        return cls(tuple(entries), tuple(returns))

    def inside_ms(self) -> float:
        """The time all the decodes took together."""
        pairs = zip(self.entries, self.returns, strict=False)
        return sum(returned - entered for entered, returned in pairs) * 1000.0

    def split(self) -> DecodeSplit | None:
        """The split of the decodes after the first (the prompt's: every side evaluates it in one decode
        here), each of one generated token; None with fewer than two of them."""
        calls = list(zip(self.entries, self.returns, strict=False))[1:]
        if len(calls) < 2:
            return None
        inside = [returned - entered for entered, returned in calls]
        between = [following[0] - current[1] for current, following in itertools.pairwise(calls)]
        return DecodeSplit(statistics.median(inside) * 1000.0, statistics.median(between) * 1e6, len(calls))


def _tracefs() -> Path:
    """tracefs, mounted if it is not yet; :class:`ProbeUnavailable` where that cannot be done."""
    if (TRACEFS / "uprobe_events").exists():
        return TRACEFS
    if os.geteuid() != 0:
        raise ProbeUnavailable("uprobes need root (tracefs, /sys/kernel/tracing)")
    mounted = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0 or not (TRACEFS / "uprobe_events").exists():
        raise ProbeUnavailable(f"tracefs could not be mounted at {TRACEFS}: {mounted.stderr.strip()}")
    return TRACEFS


def _descendants(root: int) -> set[int]:
    """``root`` and the processes it started, and those they started (from each ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The parent's id is the second field after the command name, which may hold spaces.
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, waiting = {root}, [root]
    while waiting:
        for child in children.get(waiting.pop(), []):
            if child not in found:
                found.add(child)
                waiting.append(child)
    return found


def _append(path: Path, line: str) -> None:
    """One line added to a tracefs file (which refuses the seek Python's append mode makes)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


class DecodeTracer:
    """Probes on entry to and return from :data:`DECODE_SYMBOL` in each binary, for as long as the tracer
    is entered; :meth:`calls` records the decodes one call makes.

    The probes and the buffer they write to are this process's own (a tracefs instance, an event group
    named after the process), so two tracers at once do not read or stop each other's."""

    def __init__(self, binaries: Iterable[Path]) -> None:
        self.binaries = [binary.resolve() for binary in binaries]
        self.group = f"{GROUP}_{os.getpid()}"
        self._tracefs: Path | None = None
        self._instance: Path | None = None
        self._names: list[str] = []

    def __enter__(self) -> DecodeTracer:
        try:
            self._tracefs = _tracefs()
            probes = [
                (index, binary, symbol_offset(binary, DECODE_SYMBOL))
                for index, binary in enumerate(self.binaries)
            ]
            for index, binary, offset in probes:
                for kind, name in (("p", f"in_{index}"), ("r", f"out_{index}")):
                    _append(
                        self._tracefs / "uprobe_events", f"{kind}:{self.group}/{name} {binary}:{offset:#x}"
                    )
                    self._names.append(name)
            instance = self._tracefs / "instances" / self.group
            instance.mkdir()
            self._instance = instance
            (instance / "tracing_on").write_text("0")
            (instance / "options" / "record-tgid").write_text("1")
            (instance / "events" / self.group / "enable").write_text("1")
        except OSError as exc:
            self.__exit__()
            raise ProbeUnavailable(f"the uprobes could not be set: {exc}") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            with contextlib.suppress(OSError):
                (instance / "tracing_on").write_text("0")
                (instance / "events" / self.group / "enable").write_text("0")
            with contextlib.suppress(OSError):
                instance.rmdir()
        names, self._names = self._names, []
        for name in names:
            with contextlib.suppress(OSError):
                _append((self._tracefs or TRACEFS) / "uprobe_events", f"-:{self.group}/{name}")

    def calls(self, run: Callable[[], T]) -> tuple[T, DecodeCalls]:
        """``run()``'s result, and the decodes it made: in any of the probed binaries, in this process or
        a process it started (llama-server), not in another program running the same library."""
        if self._instance is None:
            raise RuntimeError("the tracer is not entered")
        (self._instance / "trace").write_text("")  # empties the buffer
        (self._instance / "tracing_on").write_text("1")
        try:
            result = run()
        finally:
            (self._instance / "tracing_on").write_text("0")
        trace = (self._instance / "trace").read_text()
        return result, DecodeCalls.parse(trace, _descendants(os.getpid()))
