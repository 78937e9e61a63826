"""GGUF header check: refuse a file llama.cpp cannot load before handing it over.

>>> check_header(b"GGUF\\x03\\x00\\x00\\x00" + bytes(16))
3
"""

from __future__ import annotations

import struct

from snapllm.errors import NotAGGUFError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = frozenset({2, 3})
HEADER_SIZE = 24  # magic, uint32 version, uint64 tensor count, uint64 metadata key/value count


def check_header(header: bytes, *, source: str = "model") -> int:
    """Validate the first bytes of a GGUF file and return its version.

    Raises :class:`NotAGGUFError` with a message that names ``source`` and what was found instead.
    """
    if len(header) < HEADER_SIZE:
        raise NotAGGUFError(f"{source} is {len(header)} bytes, too short to be a GGUF file")
    if header[:4] != MAGIC:
        raise NotAGGUFError(f"{source} is not a GGUF file (starts with {header[:4]!r}, expected {MAGIC!r})")
    (version,) = struct.unpack_from("<I", header, 4)
    if version not in SUPPORTED_VERSIONS:
        raise NotAGGUFError(f"{source} has GGUF version {version}; supported: {sorted(SUPPORTED_VERSIONS)}")
    return version
