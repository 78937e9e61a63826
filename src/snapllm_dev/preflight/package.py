"""Inventories one built package (a function's code or a layer): its files, sizes, ELF files and wheels.

Example:
    >>> from pathlib import Path
    >>> from snapllm_dev.preflight.package import scan_package
    >>> pkg = scan_package(Path(".aws-sam/build/LlamaCppLayerArm64"))  # doctest: +SKIP
    >>> pkg.unzipped_bytes, len(pkg.elves), pkg.zipped_bytes()  # doctest: +SKIP
    (98765432, 23, 31234567)
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from snapllm_dev.preflight.elf import ElfInfo, is_elf, read_elf

#: File name endings of model weights; none belongs in a Lambda package (the model comes from S3).
WEIGHT_SUFFIXES = (".gguf", ".ggml", ".safetensors", ".onnx", ".pt", ".pth", ".ckpt", ".tflite")
#: A GGUF file starts with these bytes whatever its name.
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class WheelTag:
    """One ``Tag:`` line of a ``*.dist-info/WHEEL`` file, e.g. ``cp313-cp313-manylinux_2_17_aarch64``."""

    distribution: str
    python: str
    abi: str
    platform: str


@dataclass
class Package:
    """A directory as Lambda will unpack it (``/var/task`` for a function, ``/opt`` for a layer)."""

    name: str
    root: Path
    files: dict[str, int] = field(default_factory=dict)

    @property
    def unzipped_bytes(self) -> int:
        return sum(self.files.values())

    @cached_property
    def elves(self) -> list[ElfInfo]:
        """Every ELF file in the package (by content, not by name: ``.so.0`` and executables count)."""
        return [read_elf(self.root / rel) for rel in sorted(self.files) if is_elf(self.root / rel)]

    @cached_property
    def wheel_tags(self) -> list[WheelTag]:
        """Tags of every ``*.dist-info/WHEEL`` in the package."""
        tags = []
        for rel in sorted(self.files):
            parts = rel.split("/")
            if parts[-1] != "WHEEL" or len(parts) < 2 or not parts[-2].endswith(".dist-info"):
                continue
            distribution = parts[-2].removesuffix(".dist-info")
            for line in (self.root / rel).read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Tag":
                    python, abi, platform = [*value.strip().split("-"), "", ""][:3]
                    tags.append(WheelTag(distribution, python, abi, platform))
        return tags

    def weights(self) -> list[str]:
        """Files that look like model weights: a weights suffix or GGUF magic bytes."""
        found = []
        for rel in sorted(self.files):
            if rel.lower().endswith(WEIGHT_SUFFIXES):
                found.append(rel)
                continue
            try:
                with (self.root / rel).open("rb") as handle:
                    if handle.read(4) == GGUF_MAGIC:
                        found.append(rel)
            except OSError:
                continue
        return found

    def zipped_bytes(self) -> int:
        """Size of the deployment zip, measured by deflating every file as ``sam package`` does."""
        sink = _CountingSink()
        with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for rel in sorted(self.files):
                archive.write(self.root / rel, rel)
        return sink.count


def scan_package(root: Path, name: str | None = None) -> Package:
    """Lists the regular files under ``root`` with their sizes (symlinks followed, as zipping does)."""
    package = Package(name=name or root.name, root=root)
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=True):
        for filename in filenames:
            path = Path(dirpath, filename)
            if path.is_file():
                package.files[path.relative_to(root).as_posix()] = path.stat().st_size
    return package


class _CountingSink(io.RawIOBase):
    """A write-only, non-seekable stream that only counts bytes (zipfile then writes data descriptors)."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.count += len(data)
        return len(data)

    def tell(self) -> int:
        return self.count
