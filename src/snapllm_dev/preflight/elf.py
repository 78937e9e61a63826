"""Reads what a Lambda deploy cares about from an ELF shared object, through pyelftools (no binutils).

Three facts: the machine the code is for, the libraries it needs (``DT_NEEDED``) and the symbol versions
it needs from each (``.gnu.version_r``, e.g. ``GLIBC_2.34``), which decide whether the runtime can load it.

    info = read_elf(Path("layer/python/llama_cpp/lib/libllama.so"))
    info.machine, info.max_version("GLIBC")     # ('aarch64', (2, 34))
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE
from elftools.elf.gnuversions import GNUVerNeedSection

from snapllm_dev.preflight.errors import ElfError

ELF_MAGIC = b"\x7fELF"

#: ``e_machine`` values of the architectures Lambda runs, by the name Lambda's ``uname -m`` reports.
MACHINES: dict[int, str] = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv64"}


@dataclass(frozen=True)
class ElfInfo:
    """What one ELF file needs from the system that loads it.

    Attributes:
        path: The file.
        machine: ``aarch64``, ``x86_64``, ... or ``e_machine=<n>`` for one not in :data:`MACHINES`.
        needed: Library names from ``DT_NEEDED``, in file order.
        runpath: Directories from ``DT_RUNPATH`` (or the older ``DT_RPATH``), ``$ORIGIN`` unexpanded.
        versions: Required symbol versions per library, e.g. ``{"libc.so.6": {"GLIBC_2.17"}}``.
    """

    path: Path
    machine: str
    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    versions: dict[str, frozenset[str]] = field(default_factory=dict)

    def max_version(self, prefix: str) -> tuple[int, ...] | None:
        """Highest required version whose name is ``<prefix>_<numbers>``, or None if none is required.

        Example:
            >>> needs = {"libc.so.6": frozenset({"GLIBC_2.17", "GLIBC_2.34"})}
            >>> ElfInfo(Path("x.so"), "aarch64", versions=needs).max_version("GLIBC")
            (2, 34)
        """
        found = [parse_version(name, prefix) for names in self.versions.values() for name in names]
        numbers = [v for v in found if v is not None]
        return max(numbers) if numbers else None


def parse_version(name: str, prefix: str) -> tuple[int, ...] | None:
    """``("GLIBC_2.34", "GLIBC")`` -> ``(2, 34)``; None when the name has another prefix or is not numeric.

    Example:
        >>> parse_version("GLIBCXX_3.4.29", "GLIBCXX"), parse_version("GLIBC_PRIVATE", "GLIBC")
        ((3, 4, 29), None)
    """
    head, sep, tail = name.partition("_")
    if head != prefix or not sep:
        return None
    try:
        return tuple(int(part) for part in tail.split("."))
    except ValueError:
        return None


def format_version(version: tuple[int, ...]) -> str:
    """``(2, 34)`` -> ``"2.34"``."""
    return ".".join(str(part) for part in version)


def is_elf(path: Path) -> bool:
    """True when the file starts with the ELF magic number (cheap: reads four bytes)."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_elf(path: Path) -> ElfInfo:
    """Reads the ELF header, dynamic section and version needs of ``path`` (through pyelftools).

    Raises:
        ElfError: The file is not a well-formed 32/64-bit ELF file.
    """
    try:
        with path.open("rb") as handle:
            return _read(path, ELFFile(handle))
    except (ELFError, struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ElfError(f"{path}: not a readable ELF file ({exc})") from exc


def _read(path: Path, elf: ELFFile) -> ElfInfo:
    # pyelftools names the machines it knows (EM_AARCH64) and gives the number of any other.
    e_machine = elf.header["e_machine"]
    code = e_machine if isinstance(e_machine, int) else ENUM_E_MACHINE[e_machine]
    machine = MACHINES.get(code, f"e_machine={code}")
    needed: list[str] = []
    runpath: list[str] = []
    versions: dict[str, set[str]] = {}
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                    value = tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath
                    runpath += [d for d in value.split(":") if d]
        elif isinstance(section, GNUVerNeedSection):
            for library, auxiliaries in section.iter_versions():
                names = versions.setdefault(library.name, set())
                names.update(aux.name for aux in auxiliaries)
    return ElfInfo(
        path=path,
        machine=machine,
        needed=tuple(needed),
        runpath=tuple(runpath),
        versions={lib: frozenset(names) for lib, names in versions.items()},
    )
