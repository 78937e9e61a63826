"""``snapllm bench engine``'s arithmetic: ratios to llama-server as its users run it, the table, and the
llama-server options that give it the engine's kernels (no model runs here; the CLI test runs one)."""

from __future__ import annotations

import pytest

from snapllm.engine.settings import EngineSettings
from snapllm_dev.bench.engine import BASELINE, render, server_options, with_ratios


def test_ratios_are_taken_against_llama_server_defaults():
    rates = {
        "snapllm": {"decode_tps": [30.0], "prefill_tps": [300.0]},
        BASELINE: {"decode_tps": [20.0], "prefill_tps": [400.0]},
    }
    results = with_ratios(rates)
    assert results["snapllm"]["decode_ratio"] == 1.5
    assert results["snapllm"]["prefill_ratio"] == 0.75
    assert results[BASELINE]["decode_ratio"] == results[BASELINE]["prefill_ratio"] == 1.0
    text = render("m", {2: results}, note="a note")
    assert text.splitlines()[0] == "m: a note"
    assert "2 threads, snapllm" in text and "x1.50 [1.50-1.50] / x0.75 [0.75-0.75] of llama-server" in text


def test_a_ratio_compares_rounds_measured_side_by_side():
    # The machine's speed changed from round to round, and both sides moved with it: each round's ratio is
    # taken within the round (the side was 10% faster in two rounds and 20% in the other two).
    rates = {
        "snapllm": {"decode_tps": [12.0, 11.0, 36.0, 22.0], "prefill_tps": [1.0] * 4},
        BASELINE: {"decode_tps": [10.0, 10.0, 30.0, 20.0], "prefill_tps": [1.0] * 4},
    }
    side = with_ratios(rates)["snapllm"]
    assert side["decode_tps"] == 17.0
    assert side["decode_ratio"] == pytest.approx(1.15)
    assert side["decode_ratio_quartiles"] == pytest.approx([1.1, 1.2])
    assert side["prefill_ratio_quartiles"] == [1.0, 1.0]
    low, high = side["decode_ratio_interval"]
    assert 1.1 <= low <= 1.15 <= high <= 1.2
    assert side["rounds"] == rates["snapllm"]  # the rounds themselves, for the JSON


def test_the_table_shows_the_interval_the_median_lies_in():
    # Two loads, each steady and each other's opposite: the median is 1.0 and could be either load's.
    loads = [0] * 4 + [1] * 4
    rates = {
        "snapllm": {"decode_tps": [9.0] * 4 + [11.0] * 4, "prefill_tps": [1.0] * 8, "load": loads},
        BASELINE: {"decode_tps": [10.0] * 8, "prefill_tps": [1.0] * 8, "load": loads},
    }
    side = with_ratios(rates)["snapllm"]
    assert side["decode_ratio"] == 1.0 and side["decode_ratio_interval"] == [0.9, 1.1]
    assert side["decode_ratio_quartiles"] == [0.9, 1.1]
    text = render("m", {1: with_ratios(rates)}, note="")
    assert "x1.00 [0.90-1.10] / x1.00 [1.00-1.00] of llama-server" in text


def test_without_llama_server_there_are_rates_and_no_ratios():
    results = with_ratios({"snapllm": {"decode_tps": [30.0, 32.0], "prefill_tps": [300.0, 310.0]}})
    assert results["snapllm"]["decode_ratio"] is None
    assert results["snapllm"]["decode_tps"] == 31.0
    assert "of llama-server" not in render("m", {1: results}, note="n")


def test_the_engine_kernels_side_runs_llama_server_with_the_engines_settings():
    defaults = server_options(EngineSettings())
    assert defaults[BASELINE] == ["-np", "1", "-b", "512"]  # its own kernels: repacking on, flash auto
    assert defaults["llama-server (engine kernels)"] == ["-np", "1", "-b", "512", "-fa", "on", "-ctv", "f16"]
    no_flash = server_options(EngineSettings(flash_attention=False))
    assert no_flash["llama-server (engine kernels)"] == ["-np", "1", "-b", "512", "-fa", "off"]
    one_kernel = server_options(EngineSettings(cache_type_v="bf16"))
    assert one_kernel["llama-server (engine kernels)"][-2:] == ["-ctv", "bf16"]
    plain = server_options(EngineSettings(repack_weights=False, flash_attention=False))
    assert plain["llama-server (engine kernels)"][-3:] == ["-fa", "off", "--no-repack"]
