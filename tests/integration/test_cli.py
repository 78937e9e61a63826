"""The commands a user runs: `snapllm local invoke`, `snapllm bench coldstart` and `snapllm bench engine`.

Most run in this process through ``main(argv)`` (:func:`~tests.support.cli.run_main`), their output read at
the file descriptors, where the functions' processes write too, and must leave no thread or child process
behind; the router's invoke and the cold-start benchmark run as processes of their own
(:func:`~tests.support.cli.snapllm`), each saying why."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.support.cli import InProcessRun, run_main, snapllm
from tests.support.generation import NO_PROMPT_PREFIXES, TEST_THREADS

Runner = Callable[..., InProcessRun]


@pytest.fixture
def snapllm_main(capfd, caplog) -> Runner:
    """``snapllm ARGS`` in this process, generating on one thread with no declared prompt prefixes; it must
    leave nothing running."""

    def run(*args: str) -> InProcessRun:
        env = {"SNAPLLM_THREADS": TEST_THREADS, **NO_PROMPT_PREFIXES}
        done = run_main(args, capfd, env=env, caplog=caplog)
        assert not done.leftovers, f"left running: {done.leftovers}\n{done.stderr[-3000:]}"
        return done

    return run


def test_local_invoke_prints_the_response_on_stdout_and_timings_on_stderr(snapllm_main):
    run = snapllm_main("local", "invoke", "InferenceFunction", "-e", "events/inference/completion.json")
    assert run.code == 0, run.stderr
    response = json.loads(run.stdout)
    assert response["object"] == "text_completion"
    assert response["choices"][0]["text"]
    for row in ("S3 -> memfd", "model load", "before-snapshot (warm-up)", "restore", "time to first token"):
        assert row in run.stderr
    # The restore forks a process of one thread: Python warns when it forks one of several.
    assert "multi-threaded" not in run.stderr, run.stderr


def test_local_invoke_router_answers_api_gateway_events_from_the_repository():
    # A process of its own: the router logs to stdout, as on Lambda, and the command moves that to stderr. In
    # this process the router's logger may hold the stdout of whatever made it first.
    run = snapllm("local", "invoke", "RouterFunction", "-e", "events/router/chat.json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)  # stdout holds the response alone; logs and metrics go to stderr
    assert result["statusCode"] == 200
    completion = json.loads(result["body"])
    assert completion["object"] == "chat.completion" and completion["choices"][0]["message"]["content"]
    assert '"service":"snapllm-router"' in run.stderr  # the router's own JSON logs

    # A model the router does not serve (404) and a direct-invoke event sent to it (400) are answered by the
    # same handler: `snapllm replay` plays events/router/unknown-model.json, tests/unit/test_router.py the
    # other.


def test_bench_coldstart_reports_ratios_as_json():
    # A process of its own: the report's peak memory is the command's process's, which here would be the
    # test process's, holding whatever the tests before it loaded.
    run = snapllm(
        "bench",
        "coldstart",
        "--rounds",
        "1",
        "--invokes",
        "1",
        "--restores",
        "1",
        "--prefault",
        "none",
        "all",
        "--json",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    after_restore = result["after_restore"]
    assert set(after_restore) == {"none", "all"}
    for figures in after_restore.values():
        assert {"restore_ms", "first_token_gap_ms", "first_over_warm_invoke", "invoke_gap_ms"} <= set(figures)
        assert {"prompt_gap_ms", "generation_gap_ms", "outside_engine_gap_ms"} <= set(figures)
        assert figures["first_over_warm_invoke"]["median"] > 0
    # The prefault moves the first request's page faults into the restore.
    none, full = after_restore["none"], after_restore["all"]
    assert full["first_invoke_page_faults"]["median"] < none["first_invoke_page_faults"]["median"] / 10
    assert full["restore_ms"]["median"] > none["restore_ms"]["median"]
    assert set(result["ratios"]) == {"ready_vs_baseline", "ready_vs_vanilla", "warm_invoke_vs_bare_llama_cpp"}
    assert all(value > 0 for value in result["ratios"].values())
    low, high = result["warm_invoke_vs_bare_llama_cpp_quartiles"]
    assert 0 < low <= result["ratios"]["warm_invoke_vs_bare_llama_cpp"] <= high
    assert result["lifecycle"]["s3_to_memfd_s"] > 0
    assert result["memory"]["peak_rss_bytes"] > result["model_bytes"]


def test_bench_engine_measures_the_sides_asked_for_on_each_load_and_writes_json(tmp_path, snapllm_main):
    out = tmp_path / "engine.json"
    run = snapllm_main(
        "bench", "engine", "--model", "smollm2-135m", "--threads", "1", "--decode-tokens", "4",
        "--decode-prompt", "8", "--prefill-tokens", "32", "--rounds", "1", "--loads", "2",
        "--side", "snapllm", "--side", "llama.cpp", "--side", "llama-cpp-python", "--side", "llama-server",
        "--json", str(out),
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert "smollm2-135m: decode 4 tokens after 8, prefill 32 tokens" in run.stdout
    assert "(median of 2 loads of 1 rounds; ratios: the median of each round's [its 95%" in run.stdout
    result = json.loads(out.read_text())
    assert result["loads"] == 2 and result["confidence"] == 0.95
    sides = result["models"]["smollm2-135m"]["threads"]["1"]
    # llama-server joins where `make llama-server` has built it; the in-process sides always run.
    assert {"snapllm", "llama.cpp alone", "llama-cpp-python"} <= set(sides)
    # Every side but llama.cpp alone has its ratio to it, paired round by round.
    assert sides["llama.cpp alone"]["decode_floor_ratio"] is None
    assert all(side["decode_floor_ratio"] > 0 for name, side in sides.items() if name != "llama.cpp alone")
    assert "of llama.cpp alone" in run.stdout
    assert all(side["decode_tps"] > 0 and side["prefill_tps"] > 0 for side in sides.values())
    # Each side was loaded twice and measured once on each load.
    assert all(side["rounds"]["load"] == [0, 1] for side in sides.values())
    assert all(len(side["rounds"]["decode_tps"]) == 2 for side in sides.values())
    if "llama-server" in sides:
        assert set(sides) == {"snapllm", "llama.cpp alone", "llama-cpp-python", "llama-server"}  # no twin
        assert sides["llama-server"]["decode_ratio"] == 1.0 and sides["snapllm"]["decode_ratio"] > 0
        low, high = sides["snapllm"]["decode_ratio_interval"]
        assert low <= sides["snapllm"]["decode_ratio"] <= high
    else:
        assert "llama-server is not built" in run.stderr


def test_bench_engine_traces_where_a_tokens_time_goes_or_says_why_it_cannot(tmp_path, snapllm_main):
    out = tmp_path / "traced.json"
    run = snapllm_main(
        "bench", "engine", "--model", "smollm2-135m", "--threads", "1", "--decode-tokens", "6",
        "--decode-prompt", "8", "--prefill-tokens", "32", "--rounds", "1", "--side", "snapllm",
        "--side", "llama.cpp", "--trace-decode", "--json", str(out),
    )  # fmt: skip
    if run.code == 2:  # not root, or a kernel without uprobes: said in one line
        assert "snapllm bench engine: --trace-decode:" in run.stderr and "Traceback" not in run.stderr
        return
    assert run.code == 0, run.stderr
    sides = json.loads(out.read_text())["models"]["smollm2-135m"]["threads"]["1"]
    for side in sides.values():
        assert side["decode_inside_ms"] > 0 and side["decode_outside_ms"] > 0
        assert side["prefill_inside_ms"] > 0
        assert len(side["rounds"]["decode_outside_ms"]) == 1
    assert "ms a token +" in run.stdout and "ms outside" in run.stdout


def test_local_invoke_of_deeply_nested_events(tmp_path, snapllm_main):
    # Too deep for any JSON decoder: refused with a message, no traceback.
    too_deep = tmp_path / "too-deep.json"
    too_deep.write_text("[" * 100_000 + "]" * 100_000)
    run = snapllm_main("local", "invoke", "InferenceFunction", "-e", str(too_deep))
    assert run.code == 2
    assert "nests too deeply" in run.stderr and "Traceback" not in run.stderr
    # Decodable, but deeper than any request: the function answers a structured 400.
    deep = tmp_path / "deep.json"
    deep.write_text('{"prompt": "Hi", "metadata": ' + "[" * 5000 + "]" * 5000 + "}")
    run = snapllm_main("local", "invoke", "InferenceFunction", "-e", str(deep), "--model", "smollm2-135m")
    assert run.code == 0, run.stderr
    body = json.loads(run.stdout)
    assert body["statusCode"] == 400 and "nests deeper than" in body["error"]["message"]
