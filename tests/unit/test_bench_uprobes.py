"""``snapllm bench engine --trace-decode``'s parts that need no probe: where llama.cpp's decode lies in a
binary, and a trace read into each token's time inside and outside it (the CLI test sets real probes)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp.llama_cpp as low_level
import pytest

from snapllm_dev.bench.uprobes import DECODE_SYMBOL, DecodeCalls, ProbeUnavailable, symbol_offset

#: What tracefs prints for a uprobe and a uretprobe with the record-tgid option (the format of
#: ``/sys/kernel/tracing/instances/<name>/trace``): llama-server's decode runs on a thread of its own.
TRACE = """# tracer: nop
#           TASK-PID     TGID     CPU#  |||||  TIMESTAMP  FUNCTION
          python-812     (    812) [001] DBZff  2170.000000: in_0: (0x7f3c1a5ea670)
          python-812     (    812) [001] DBZff  2170.300000: out_0: (0x7f3c1a5ea670 <- 0x7f3c1a5ebfd5)
          python-812     (    812) [001] DBZff  2170.300250: in_0: (0x7f3c1a5ea670)
          python-977     (    977) [000] DBZff  2170.300300: in_0: (0x7f3c1a5ea670)
          python-812     (    812) [001] DBZff  2170.310250: out_0: (0x7f3c1a5ea670 <- 0x7f3c1a5ebfd5)
          python-812     (    812) [001] DBZff  2170.310500: in_0: (0x7f3c1a5ea670)
          python-977     (    977) [000] DBZff  2170.311300: out_0: (0x7f3c1a5ea670 <- 0x7f3c1a5ebfd5)
          python-812     (    812) [001] DBZff  2170.322500: out_0: (0x7f3c1a5ea670 <- 0x7f3c1a5ebfd5)
     llama-server-91     (     90) [000] DBZff  2170.322800: in_1: (0x55d5a6dd5290)
     llama-server-91     (     90) [000] DBZff  2170.333800: out_1: (0x55d5a6dd5290 <- 0x55d5a6c1e0a1)
"""


def test_a_trace_gives_each_generated_tokens_time_inside_and_outside_the_decode():
    # Process 977 runs the same library at the same time (another program): its decodes are not these.
    calls = DecodeCalls.parse(TRACE, processes={812, 90})
    assert len(calls.entries) == len(calls.returns) == 4
    assert calls.inside_ms() == pytest.approx(300 + 10 + 12 + 11)
    split = calls.split()
    assert split is not None and split.tokens == 3  # the prompt's decode is left out
    assert split.inside_ms == pytest.approx(11.0)  # the median of 10, 12 and 11 ms
    assert split.outside_us == pytest.approx(275.0)  # between decodes: 250 and 300 us


def test_a_request_with_one_generated_decode_has_no_split():
    assert DecodeCalls.parse(TRACE, processes={977}).split() is None
    assert len(DecodeCalls.parse(TRACE).entries) == 5  # every process's
    assert DecodeCalls.parse("# tracer: nop\n").inside_ms() == 0.0


def test_the_probe_lies_on_the_decode_functions_first_instruction():
    # The library llama-cpp-python loaded: the bytes at the offset found in the file are the bytes the
    # process runs at that symbol's address.
    library = Path(low_level._lib._name)
    address = ctypes.cast(getattr(low_level._lib, DECODE_SYMBOL), ctypes.c_void_p).value
    offset = symbol_offset(library, DECODE_SYMBOL)
    with library.open("rb") as binary:
        binary.seek(offset)
        assert binary.read(32) == ctypes.string_at(address, 32)


def test_a_binary_without_llama_cpp_is_refused_with_its_name():
    with pytest.raises(ProbeUnavailable, match="has no symbol"):
        symbol_offset(Path("/bin/true").resolve(), DECODE_SYMBOL)
