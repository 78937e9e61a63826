"""``snapllm bench engine``'s arithmetic: ratios to llama-server as its users run it, the table, and the
llama-server options that give it the engine's kernels (no model runs here; the CLI test runs one)."""

from __future__ import annotations

import pytest

from snapllm.engine.settings import EngineSettings
from snapllm_dev.bench.engine import BASELINE, FLOOR, SETTLE_S, render, server_options, settle_s, with_ratios


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
    assert defaults["llama-server (engine kernels)"] == ["-np", "1", "-b", "512", "-fa", "on", "-ctv", "bf16"]
    no_flash = server_options(EngineSettings(flash_attention=False))
    assert no_flash["llama-server (engine kernels)"] == ["-np", "1", "-b", "512", "-fa", "off"]
    one_kernel = server_options(EngineSettings(cache_type_v="bf16"))
    assert one_kernel["llama-server (engine kernels)"][-2:] == ["-ctv", "bf16"]
    plain = server_options(EngineSettings(repack_weights=False, flash_attention=False))
    assert plain["llama-server (engine kernels)"][-3:] == ["-fa", "off", "--no-repack"]


def test_every_side_but_llama_cpp_alone_gets_its_ratio_to_it_as_well():
    rates = {
        "snapllm": {"decode_tps": [19.0, 38.0], "prefill_tps": [100.0, 100.0]},
        FLOOR: {"decode_tps": [20.0, 40.0], "prefill_tps": [100.0, 125.0]},
        BASELINE: {"decode_tps": [19.0, 36.0], "prefill_tps": [100.0, 100.0]},
    }
    results = with_ratios(rates)
    assert results["snapllm"]["decode_floor_ratio"] == pytest.approx(0.95)  # each round's: 0.95 and 0.95
    assert results["snapllm"]["prefill_floor_ratio"] == pytest.approx(0.9)  # 1.0 and 0.8
    assert results[BASELINE]["decode_floor_ratio"] == pytest.approx((0.95 + 0.9) / 2)
    assert results[FLOOR]["decode_floor_ratio"] is None  # no ratio to itself
    text = render("m", {1: results}, note="")
    assert "x0.95 [0.95-0.95] / x0.90 [0.80-1.00] of llama.cpp alone" in text


def test_traced_decodes_give_the_ratio_at_the_baselines_decode_time():
    # The kernels' time swings from round to round (the host's noise); each program's own time per token
    # does not. At its own decode time, llama-server would have spent 0.5 ms a token outside it where the
    # engine spent 0.2: (10 + 0.5) / (10 + 0.2), whatever llama-server's own decodes took.
    snapllm = {"decode_inside_ms": [10.0, 10.0], "decode_outside_ms": [0.2, 0.2]}
    snapllm |= {"prefill_inside_ms": [900.0, 1000.0], "prefill_outside_ms": [2.0, 2.0]}
    server = {"decode_inside_ms": [12.0, 8.0], "decode_outside_ms": [0.5, 0.5]}
    server |= {"prefill_inside_ms": [1100.0, 800.0], "prefill_outside_ms": [1.0, 1.0]}
    rates = {
        "snapllm": {"decode_tps": [96.0, 97.0], "prefill_tps": [500.0, 450.0], **snapllm},
        BASELINE: {"decode_tps": [80.0, 120.0], "prefill_tps": [400.0, 600.0], **server},
    }
    side = with_ratios(rates)["snapllm"]
    assert side["decode_inside_ms"] == 10.0 and side["decode_outside_ms"] == 0.2
    assert side["decode_split_ratio"] == pytest.approx(10.5 / 10.2)
    assert side["decode_split_ratio_interval"] == pytest.approx([10.5 / 10.2] * 2)
    # A prompt: (900 + 1) / (900 + 2) and (1000 + 1) / (1000 + 2).
    assert side["prefill_split_ratio"] == pytest.approx((901 / 902 + 1001 / 1002) / 2)
    text = render("m", {1: with_ratios(rates)}, note="")
    assert (
        "in llama.cpp's decode 10.00 ms a token + 0.200 ms outside, 950.0 ms a prompt + 2.0 ms outside"
        in text
    )
    assert "at equal decode time x1.029 [1.029-1.029] / x0.999 [0.999-0.999] of llama-server" in text
    assert "at equal decode time" not in render("m", {1: with_ratios({"snapllm": rates["snapllm"]})}, note="")


def test_sides_on_one_thread_are_measured_without_a_pause_between_requests():
    # Only worker threads poll after a request; on one thread a side has none to wait for.
    assert settle_s(1) == 0.0
    assert settle_s(2) == settle_s(6) == SETTLE_S > 0
