import struct

import pytest

from snapllm.engine import gguf
from snapllm.errors import NotAGGUFError


def header(magic: bytes = b"GGUF", version: int = 3) -> bytes:
    return magic + struct.pack("<IQQ", version, 201, 37)


def test_accepts_supported_versions():
    assert gguf.check_header(header(version=3)) == 3
    assert gguf.check_header(header(version=2)) == 2


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (header(magic=b"\x7fELF"), "not a GGUF file"),
        (header(version=1), "GGUF version 1"),
        (header(version=4), "GGUF version 4"),
        (b"GGUF", "too short"),
    ],
)
def test_rejects_with_a_message_naming_the_source(data, fragment):
    with pytest.raises(NotAGGUFError, match=fragment) as caught:
        gguf.check_header(data, source="s3://bucket/model.bin")
    assert "s3://bucket/model.bin" in str(caught.value)


def test_the_packaged_model_has_a_valid_header(model_path):
    assert gguf.check_header(model_path.read_bytes()[: gguf.HEADER_SIZE]) == 3
