"""``snapllm bench engine``'s in-process sides with the real model: llama.cpp alone generates what the engine
generates (the same work, so their ratio is the engine's own cost), and the uprobes on llama.cpp's decode
see every decode of a request where the machine lets them be set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp.llama_cpp as low_level
import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm_dev.bench.engine import engine_side, floor_side, prompt_tokens
from snapllm_dev.bench.uprobes import DecodeTracer, ProbeUnavailable

TOKENS = 12


@pytest.fixture(scope="module", params=[1, 2], ids=["1-thread", "2-threads"])
def engine(request: pytest.FixtureRequest, model_path: Path) -> Iterator[Engine]:
    loaded = Engine.load(str(model_path), EngineSettings(threads=request.param), model_name="sides")
    yield loaded
    loaded.close()


def test_llama_cpp_alone_generates_the_engines_text_in_turn_with_it(engine):
    prompt = prompt_tokens(engine, 40)
    alone, engine_run = floor_side(engine), engine_side(engine)
    first = alone(prompt, TOKENS)
    # Taking turns on one context: neither leaves the other anything it would read.
    assert engine_run(prompt, TOKENS).text == first.text == alone(prompt, TOKENS).text != ""
    assert first.decode_tps > 0 and first.prefill_tps > 0


def test_the_probes_see_each_decode_of_a_request(engine):
    run = engine_side(engine)
    try:
        with DecodeTracer([Path(low_level._lib._name)]) as tracer:
            sample, calls = tracer.calls(lambda: run(prompt_tokens(engine, 40), TOKENS))
    except ProbeUnavailable as exc:  # not root, or a kernel without uprobes
        pytest.skip(f"uprobes cannot be set on this machine: {exc}")
    # The prompt in one decode, then one a token but the last (sampled, never evaluated).
    assert len(calls.entries) == len(calls.returns) == TOKENS
    split = calls.split()
    assert split is not None and split.tokens == TOKENS - 1
    # A token's own work is less than its decode, and a median of times is at most twice their mean (the
    # engine's rate is one over the mean time a token took), however busy the machine is.
    assert 0 < split.outside_us / 1000.0 < split.inside_ms <= 2 * 1000.0 / sample.decode_tps
