"""Reads what a Lambda deploy cares about from an ELF shared object, without binutils.

Only three facts are read: the machine the code is for, the libraries it needs (``DT_NEEDED``) and the symbol
versions it needs from each (``.gnu.version_r``, e.g. ``GLIBC_2.34``). Those decide whether the dynamic
loader of the Lambda runtime can load the file.

Example:
    >>> from pathlib import Path
    >>> from snapllm_dev.preflight.elf import is_elf, read_elf
    >>> info = read_elf(Path("layer/python/llama_cpp/lib/libllama.so"))  # doctest: +SKIP
    >>> info.machine, info.max_version("GLIBC")  # doctest: +SKIP
    ('aarch64', (2, 34))
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from snapllm_dev.preflight.errors import ElfError

ELF_MAGIC = b"\x7fELF"

#: ``e_machine`` values of the architectures Lambda runs, by the name Lambda's ``uname -m`` reports.
MACHINES: dict[int, str] = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv64"}

_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NULL = 0
_DT_NEEDED = 1
_DT_RPATH = 15
_DT_RUNPATH = 29


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
    """Parses the ELF header, dynamic section and version needs of ``path``.

    Raises:
        ElfError: The file is not a well-formed 32/64-bit ELF file.
    """
    data = path.read_bytes()
    try:
        return _parse(path, data)
    except (struct.error, IndexError, ValueError) as exc:
        raise ElfError(f"{path}: not a readable ELF file ({exc})") from exc


def _parse(path: Path, data: bytes) -> ElfInfo:
    if data[:4] != ELF_MAGIC:
        raise ElfError(f"{path}: no ELF magic number")
    ei_class, ei_data = data[4], data[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise ElfError(f"{path}: unknown ELF class {ei_class} or byte order {ei_data}")
    wide = ei_class == 2
    order = "<" if ei_data == 1 else ">"
    (e_machine,) = struct.unpack_from(order + "H", data, 18)
    machine = MACHINES.get(e_machine, f"e_machine={e_machine}")

    if wide:
        (e_shoff,) = struct.unpack_from(order + "Q", data, 0x28)
        e_shentsize, e_shnum = struct.unpack_from(order + "HH", data, 0x3A)
        section_format = order + "IIQQQQIIQQ"
    else:
        (e_shoff,) = struct.unpack_from(order + "I", data, 0x20)
        e_shentsize, e_shnum = struct.unpack_from(order + "HH", data, 0x2E)
        section_format = order + "IIIIIIIIII"

    # (type, offset, size, link, info) per section header
    sections = []
    for index in range(e_shnum):
        fields = struct.unpack_from(section_format, data, e_shoff + index * e_shentsize)
        _name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, sh_info = fields[:8]
        sections.append((sh_type, sh_offset, sh_size, sh_link, sh_info))

    def string_at(table: int, offset: int) -> str:
        start = sections[table][1] + offset
        end = data.index(b"\x00", start)
        return data[start:end].decode("utf-8", "replace")

    needed: list[str] = []
    runpath: list[str] = []
    versions: dict[str, set[str]] = {}
    dyn_format, dyn_size = (order + "qQ", 16) if wide else (order + "iI", 8)
    for sh_type, offset, size, link, info in sections:
        if sh_type == _SHT_DYNAMIC:
            for pos in range(offset, offset + size, dyn_size):
                tag, value = struct.unpack_from(dyn_format, data, pos)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    needed.append(string_at(link, value))
                elif tag in (_DT_RUNPATH, _DT_RPATH):
                    runpath += [d for d in string_at(link, value).split(":") if d]
        elif sh_type == _SHT_GNU_VERNEED:
            pos = offset
            # Verneed entries chain through vn_next; sh_info is their count.
            for _ in range(info):
                _vn_version, vn_cnt, vn_file, vn_aux, vn_next = struct.unpack_from(order + "HHIII", data, pos)
                library = string_at(link, vn_file)
                aux = pos + vn_aux
                for _ in range(vn_cnt):
                    _hash, _flags, _other, vna_name, vna_next = struct.unpack_from(order + "IHHII", data, aux)
                    versions.setdefault(library, set()).add(string_at(link, vna_name))
                    aux += vna_next
                pos += vn_next
    return ElfInfo(
        path=path,
        machine=machine,
        needed=tuple(needed),
        runpath=tuple(runpath),
        versions={lib: frozenset(names) for lib, names in versions.items()},
    )
