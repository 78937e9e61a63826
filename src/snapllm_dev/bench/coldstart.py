"""``snapllm bench coldstart``: where a cold start's time goes, next to the two paths it replaces.

It interleaves snapllm's S3 -> memfd -> load with a one-GET floor and the vanilla /tmp download, compares
the real handler's warm invoke with bare ``llama_cpp``, and restores a snapshot per ``SNAPLLM_PREFAULT``
mode (``--restores``), each environment answering FIRST, OTHER, then FIRST again; ``--peer llama-server``
starts llama.cpp's server beside, ``--faults`` tests the load under network faults (``loadfaults``).
docs/benchmarks.md says how each is measured and what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from llama_cpp import Llama

from snapllm.engine.loader import S3ModelLoader
from snapllm.engine.model import Engine
from snapllm.engine.settings import ModelSource, PrefaultMode
from snapllm.errors import ConfigurationError
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.system import available_cpus
from snapllm_dev import sam
from snapllm_dev.bench import loadfaults
from snapllm_dev.bench.grammar import llama_server_binary, server_command, wait_until_healthy
from snapllm_dev.bench.stats import PairedRatio
from snapllm_dev.footprint import MemoryFootprint
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.kinds import model_function
from snapllm_dev.local.lifecycle import InvokeResult, LocalFunctionError
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.report import megabytes, seconds, table
from snapllm_dev.local.s3 import free_port
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment
from snapllm_dev.packaged_models import model_path


class BenchRunError(RuntimeError):
    """A run that cannot give its figures: a benchmark request failed, or two sides of a comparison did not
    do the same work (prompt tokens evaluated, tokens generated)."""


#: The first request after a restore and the warm reference (see the module docstring): text completions,
#: which every model serves, of the same token count with SmolLM2's and Gemma 3's tokenizers. Greedy, so
#: the first and the warm invoke of FIRST generate the same tokens.
FIRST: dict[str, Any] = {
    "prompt": "Three common uses of a serverless function are",
    "max_tokens": 32,
    "temperature": 0.0,
}
#: The warm reference: FIRST's length in tokens, and nothing in common with it but the beginning-of-sequence
#: token, so that neither reuses a cached word of the other.
OTHER: dict[str, Any] = {**FIRST, "prompt": "Four warm colours of a summer sunset sky are"}
#: The lifecycle's and the warm comparison's request: a chat, or for a model without a chat template (a
#: base model) a text completion of the same text.
TEXT_REQUEST: dict[str, Any] = {
    "prompt": "List three uses of a serverless function.",
    "max_tokens": 48,
    "temperature": 0.0,
}
CHAT_REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "List three uses of a serverless function."}],
    "max_tokens": 48,
    # Greedy and unseeded on both sides, so both reuse the cached prompt prefix alike (a seeded request
    # re-evaluates its prompt to be reproducible).
    "temperature": 0.0,
}


@dataclass
class Samples:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])


def _timed(func: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = func()
    return time.perf_counter() - started, result


def _measure_loads(
    deployment: LocalDeployment, settings: InferenceSettings, rounds: int, samples: Samples
) -> None:
    source = ModelSource(bucket=LOCAL_MODEL_BUCKET, key=deployment.model_key, sha256=deployment.model_sha256)
    s3 = deployment.s3.client()
    loader = S3ModelLoader(s3, settings.loader)
    llama_args = {"n_ctx": settings.engine.n_ctx, "n_batch": settings.engine.n_batch, "verbose": False}
    with tempfile.TemporaryDirectory(prefix="snapllm-bench-") as tmp:
        cached = Path(tmp) / "cached.gguf"
        cached.write_bytes(deployment.model_path.read_bytes())
        for _ in range(rounds):
            # snapllm: S3 -> memfd -> llama.cpp maps the memfd.
            download_s, model = _timed(lambda: loader.load(source))
            with model:
                load_s, engine = _timed(
                    lambda m=model: Engine.load(m.path, settings.engine, model_name="bench")
                )
            del engine
            samples.add("snapllm.s3_to_memfd", download_s)
            samples.add("snapllm.model_load", load_s)
            samples.add("snapllm.ready", download_s + load_s)

            # baseline: one GET into memory + load of the same bytes from a page-cached file.
            get_s, _ = _timed(lambda: s3.get_object(Bucket=source.bucket, Key=source.key)["Body"].read())
            cached_s, llama = _timed(lambda: Llama(model_path=str(cached), **llama_args))
            del llama
            samples.add("baseline.get", get_s)
            samples.add("baseline.load", cached_s)
            samples.add("baseline.ready", get_s + cached_s)

            # vanilla: download_file to /tmp, then load from there.
            target = Path(tmp) / "vanilla.gguf"
            fetch_s, _ = _timed(lambda t=target: s3.download_file(source.bucket, source.key, str(t)))
            vload_s, llama = _timed(lambda t=target: Llama(model_path=str(t), **llama_args))
            del llama
            target.unlink()
            samples.add("vanilla.download", fetch_s)
            samples.add("vanilla.load", vload_s)
            samples.add("vanilla.ready", fetch_s + vload_s)


def _measure_invokes(
    deployment: LocalDeployment,
    settings: InferenceSettings,
    request: dict[str, Any],
    invokes: int,
    samples: Samples,
) -> tuple[dict[str, Any], MemoryFootprint]:
    """Warm invokes of the real handler against bare llama_cpp; returns a response and the memory that
    ``snapllm preflight`` estimates for the model the handler served."""
    source = ModelSource(
        bucket=LOCAL_MODEL_BUCKET, key=deployment.model_key, sha256=deployment.model_sha256, name="bench"
    )
    runtime = InferenceRuntime.initialize(
        InferenceSettings(
            model=source, loader=settings.loader, engine=settings.engine, serving=settings.serving
        ),
        S3ModelLoader(deployment.s3.client(), settings.loader),
    )
    runtime.before_snapshot()
    engine = runtime.engine
    bare = Llama(
        model_path=str(deployment.model_path),
        n_ctx=settings.engine.n_ctx,
        n_batch=settings.engine.n_batch,
        n_threads=engine.threads,
        n_threads_batch=engine.threads,
        verbose=False,
    )

    def bare_chat() -> Any:  # top_p: llama_cpp's default, 0.95, as the handler's default
        limits = {"max_tokens": request["max_tokens"], "temperature": request["temperature"]}
        if "messages" in request:
            return bare.create_chat_completion(messages=request["messages"], **limits)
        return bare.create_completion(prompt=request["prompt"], **limits)

    # One untimed round on each side, so both time requests whose prompt prefix is already cached.
    bare_chat()
    runtime.handle(dict(request), LocalContext.create("bench", timeout_s=120, memory_mb=10240))
    sample_response: dict[str, Any] = {}
    for invoke in range(invokes):
        context = LocalContext.create("bench", timeout_s=120, memory_mb=10240)
        # The sides take turns at going first, so neither always runs on a machine the other just warmed.
        if invoke % 2:
            bare_s, bare_response = _timed(bare_chat)
            ours_s, sample_response = _timed(lambda c=context: runtime.handle(dict(request), c))
        else:
            ours_s, sample_response = _timed(lambda c=context: runtime.handle(dict(request), c))
            bare_s, bare_response = _timed(bare_chat)
        if sample_response["usage"]["completion_tokens"] != bare_response["usage"]["completion_tokens"]:
            raise BenchRunError("snapllm and bare llama_cpp generated different token counts; not comparable")
        samples.add("warm.snapllm", ours_s)
        samples.add("warm.bare", bare_s)
    footprint = MemoryFootprint.estimate(
        engine.llama.metadata, weights_bytes=deployment.model_path.stat().st_size, n_ctx=engine.n_ctx
    )
    return sample_response, footprint


def _measure_lifecycle(
    deployment: LocalDeployment, request: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The phases of one init -> snapshot -> restore -> invoke, and the environment the function had."""
    with deployment.function(model_function(deployment.template).name) as function:
        environment_variables = function.environment
        init = function.init()
        snapshot = function.snapshot()
        with function.restore() as environment:
            first = environment.invoke(dict(request))
            warm = environment.invoke(dict(request))
            restore_s = environment.restore_s
    phases = snapshot["phases"]
    return {
        "import_s": init["init_s"] - phases["init"],
        "s3_to_memfd_s": phases["s3_to_memfd"],
        "model_load_s": phases["model_load"],
        "warm_up_s": phases["warm_up"],
        "restore_s": restore_s,
        "first_invoke_s": first.duration_s,
        "first_token_ms": first.response["timings"]["time_to_first_token_ms"],
        "warm_invoke_s": warm.duration_s,
        # The speed `snapllm cost` reads: a warm environment's time to first token and decode rate.
        "warm_first_token_ms": warm.response["timings"]["time_to_first_token_ms"],
        "warm_tokens_per_s": warm.response["timings"]["tokens_per_second"],
        "prompt_tokens": warm.response["usage"]["prompt_tokens"],
        "completion_tokens": warm.response["usage"]["completion_tokens"],
        "rss_after_init_bytes": init["rss_bytes"],
        "peak_rss_bytes": snapshot["peak_rss_bytes"],
    }, environment_variables


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _first_token_ms(result: InvokeResult) -> float:
    if result.error is not None or "timings" not in result.response:
        raise BenchRunError(f"the benchmark request failed: {result.error or result.response}")
    return float(result.response["timings"]["time_to_first_token_ms"])


def measure_restores(deployment: LocalDeployment, mode: PrefaultMode, restores: int) -> dict[str, Any]:
    """One init and snapshot with ``SNAPLLM_PREFAULT=mode``, then ``restores`` restored environments, each
    answering FIRST, OTHER and FIRST again (see the module docstring); medians with their range."""
    samples = Samples()
    name = model_function(deployment.template).name
    with deployment.function(name, SNAPLLM_PREFAULT=mode) as function:
        function.init()
        function.snapshot()
        for _ in range(restores):
            with function.restore() as environment:
                first = environment.invoke(dict(FIRST))
                other = environment.invoke(dict(OTHER))
                warm = environment.invoke(dict(FIRST))
                restore_s = environment.restore_s
            first_ms, other_ms = _first_token_ms(first), _first_token_ms(other)
            _first_token_ms(warm)
            counts = [
                (_evaluated_tokens(r), r.response["usage"]["completion_tokens"]) for r in (first, other, warm)
            ]
            if counts[0] != counts[2] or counts[0][0] != counts[1][0]:
                raise BenchRunError(
                    "the first and the warm requests differ in the prompt tokens they evaluate or the tokens "
                    f"they generate; not comparable: {first.response['usage']}, {other.response['usage']}, "
                    f"{warm.response['usage']}"
                )
            samples.add("restore_ms", restore_s * 1000.0)
            samples.add("first_token_ms", first_ms)
            samples.add("warm_first_token_ms", other_ms)
            samples.add("first_token_gap_ms", first_ms - other_ms)
            samples.add("first_invoke_ms", first.duration_s * 1000.0)
            samples.add("warm_invoke_ms", warm.duration_s * 1000.0)
            samples.add("first_over_warm_invoke", first.duration_s / warm.duration_s)
            samples.add(
                "first_invoke_page_faults", first.faults.get("minor", 0) + first.faults.get("major", 0)
            )
            samples.add("warm_invoke_page_faults", warm.faults.get("minor", 0) + warm.faults.get("major", 0))
            samples.add("first_invoke_major_faults", first.faults.get("major", 0))
            # Where the first invoke's extra time goes, against the warm invoke of the same request.
            for part, value in _gap_parts(first, warm).items():
                samples.add(part, value)
    return {name: _spread(values) for name, values in samples.values.items()}


def measure_peer_starts(model: Path, *, threads: int, n_ctx: int, starts: int) -> dict[str, Any]:
    """llama-server started ``starts`` times on ``model``: each start's time to its first healthy answer,
    then FIRST, OTHER and FIRST again (see the module docstring); medians with their range."""
    binary = llama_server_binary("coldstart")
    samples = Samples()
    for _ in range(starts):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = server_command(binary, model, port=port, threads=threads, n_ctx=n_ctx, options=("-np", "1"))
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until_healthy(process, url, bench="coldstart")
            ready_s = time.perf_counter() - started
            first, other, warm = (_peer_completion(url, request) for request in (FIRST, OTHER, FIRST))
        finally:
            stop_process(process)
        if first["tokens_predicted"] != warm["tokens_predicted"]:
            raise BenchRunError("llama-server's first and warm requests generated different token counts")
        samples.add("ready_ms", ready_s * 1000.0)
        samples.add("first_request_ms", first["wall_ms"])
        samples.add("start_to_first_answer_ms", ready_s * 1000.0 + first["wall_ms"])
        samples.add("first_prompt_gap_ms", first["timings"]["prompt_ms"] - other["timings"]["prompt_ms"])
        samples.add("first_over_warm_request", first["wall_ms"] / warm["wall_ms"])
    return {name: _spread(values) for name, values in samples.values.items()}


def _peer_completion(url: str, request: dict[str, Any]) -> dict[str, Any]:
    body = {
        "prompt": request["prompt"],
        "n_predict": request["max_tokens"],
        "temperature": 0,
        "cache_prompt": True,
    }
    started = time.perf_counter()
    response = httpx.post(f"{url}/completion", json=body, timeout=600)
    wall_ms = (time.perf_counter() - started) * 1000.0
    if response.status_code != 200:
        raise BenchRunError(f"llama-server answered {response.status_code}: {response.text[:500]}")
    return {**response.json(), "wall_ms": wall_ms}


def _evaluated_tokens(result: InvokeResult) -> int:
    """The prompt tokens a request evaluated: its prompt less what it took from the KV cache."""
    usage = result.response["usage"]
    return int(usage["prompt_tokens"]) - int(
        (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    )


def _gap_parts(first: InvokeResult, warm: InvokeResult) -> dict[str, float]:
    """The first invoke minus the warm one, part by part: prompt evaluation (to the first token), token
    generation, and the handler's time outside the engine (validation, rendering, logging)."""

    def parts(result: InvokeResult) -> tuple[float, float, float]:
        timings = result.response["timings"]
        outside = result.duration_s * 1000.0 - float(timings["total_ms"])
        return float(timings["prompt_ms"]), float(timings["generation_ms"]), outside

    (first_prompt, first_generation, first_outside), (warm_prompt, warm_generation, warm_outside) = (
        parts(first),
        parts(warm),
    )
    return {
        "invoke_gap_ms": (first.duration_s - warm.duration_s) * 1000.0,
        "prompt_gap_ms": first_prompt - warm_prompt,
        "generation_gap_ms": first_generation - warm_generation,
        "outside_engine_gap_ms": first_outside - warm_outside,
    }


def _has_chat_template(model: Path) -> bool:
    return "tokenizer.chat_template" in Llama(model_path=str(model), vocab_only=True, verbose=False).metadata


def run(args: argparse.Namespace) -> int:
    """``snapllm bench coldstart``: exit 2 when the model, the template or a variable is unusable."""
    try:
        model = model_path(args.model)
        return loadfaults.run(args, model) if args.faults else _run(args, model)
    except LocalFunctionError as exc:
        print(f"snapllm bench coldstart: {exc}", file=sys.stderr)
        return 2 if exc.is_configuration_error else 1
    except ConfigurationError as exc:
        print(f"snapllm bench coldstart: {exc}", file=sys.stderr)
        return 2
    except BenchRunError as exc:
        print(f"snapllm bench coldstart: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, model: Path) -> int:
    samples = Samples()
    with LocalDeployment.start(sam.load(args.template), model_path=model) as deployment:
        request = CHAT_REQUEST if _has_chat_template(model) else TEXT_REQUEST
        lifecycle, environment_variables = _measure_lifecycle(deployment, request)
        after_restore = {mode: measure_restores(deployment, mode, args.restores) for mode in args.prefault}
        # The in-process paths use the settings the function ran with (template, local profile, overrides).
        settings = InferenceSettings.from_env(environment_variables)
        _measure_loads(deployment, settings, args.rounds, samples)
        response, footprint = _measure_invokes(deployment, settings, request, args.invokes, samples)
    engine_settings = settings.engine
    peer = (
        measure_peer_starts(
            model,
            threads=engine_settings.threads or available_cpus(),
            n_ctx=engine_settings.n_ctx,
            starts=args.restores,
        )
        if args.peer
        else None
    )
    warm = PairedRatio.of(samples.values["warm.snapllm"], samples.values["warm.bare"])
    # Preflight's estimate: the measured peak checks what `snapllm preflight --model` asks a function for.
    budget = footprint.needed_bytes
    result = {
        "model": model.name,
        "model_bytes": footprint.weights_bytes,
        "lifecycle": lifecycle,
        "after_restore": after_restore,
        "medians_s": {name: samples.median(name) for name in samples.values},
        "ratios": {
            "ready_vs_baseline": samples.median("snapllm.ready") / samples.median("baseline.ready"),
            "ready_vs_vanilla": samples.median("snapllm.ready") / samples.median("vanilla.ready"),
            "warm_invoke_vs_bare_llama_cpp": warm.median,
        },
        "warm_invoke_vs_bare_llama_cpp_quartiles": list(warm.quartiles),
        "memory": {
            "peak_rss_bytes": lifecycle["peak_rss_bytes"],
            "kv_cache_bytes": footprint.kv_cache_bytes,
            "budget_bytes": budget,
            "within_budget": lifecycle["peak_rss_bytes"] <= budget,
        },
        "completion_tokens": response["usage"]["completion_tokens"],
        "peer": peer,
        "settings": {
            "part_size": settings.loader.part_size,
            "concurrency": settings.loader.concurrency,
            "n_ctx": engine_settings.n_ctx,
            "threads": engine_settings.threads or "auto",
        },
        "rounds": args.rounds,
        "invokes": args.invokes,
        "restores": args.restores,
    }
    if peer is not None:
        # A restored environment's restore and first invoke, against a new llama-server's start and first
        # request (the first prefault mode measured).
        restored = next(iter(after_restore.values()))
        ours_ms = restored["restore_ms"]["median"] + restored["first_invoke_ms"]["median"]
        result["ratios"]["restore_and_first_invoke_vs_llama_server_start_and_first_request"] = (
            ours_ms / peer["start_to_first_answer_ms"]["median"]
        )
    print(json.dumps(result, indent=2) if args.json else _render(result))
    return 0


def _render(result: dict[str, Any]) -> str:
    life, med, ratios, mem = result["lifecycle"], result["medians_s"], result["ratios"], result["memory"]
    low, high = result["warm_invoke_vs_bare_llama_cpp_quartiles"]
    warm_ratio = f"{ratios['warm_invoke_vs_bare_llama_cpp']:.3f} [{low:.3f}-{high:.3f}]"
    lifecycle = table(
        [
            ("import", seconds(life["import_s"])),
            ("S3 -> memfd", seconds(life["s3_to_memfd_s"])),
            ("model load", seconds(life["model_load_s"])),
            ("warm-up (before snapshot)", seconds(life["warm_up_s"])),
            ("restore", seconds(life["restore_s"])),
            ("first invoke", seconds(life["first_invoke_s"])),
            ("  first token", f"{life['first_token_ms']:.1f} ms"),
            ("warm invoke", seconds(life["warm_invoke_s"])),
        ],
        title="SnapStart lifecycle (separate process)",
    )

    def path(name: str) -> str:
        parts = [k for k in med if k.startswith(name + ".") and not k.endswith(".ready")]
        detail = " + ".join(seconds(med[k]) for k in parts)
        return f"{seconds(med[name + '.ready'])}  ({detail})"

    paths = table(
        [
            ("snapllm  S3 -> memfd + load", path("snapllm")),
            ("baseline one GET + cached load", path("baseline")),
            ("vanilla  /tmp download + load", path("vanilla")),
            ("warm invoke snapllm handler", seconds(med["warm.snapllm"])),
            ("warm invoke bare llama_cpp", seconds(med["warm.bare"])),
        ],
        title=f"model ready and warm invoke (medians of {result['rounds']} / {result['invokes']} runs)",
    )
    ratio = table(
        [
            ("ready: snapllm / baseline", f"{ratios['ready_vs_baseline']:.3f}"),
            ("ready: snapllm / vanilla", f"{ratios['ready_vs_vanilla']:.3f}"),
            ("warm invoke: snapllm / bare (median of each invoke's ratio [quartiles])", warm_ratio),
        ],
        title="ratios",
    )
    memory = table(
        [
            ("peak RSS (init + warm-up)", megabytes(mem["peak_rss_bytes"])),
            ("budget: preflight's estimate", megabytes(mem["budget_bytes"])),
            ("within budget", str(mem["within_budget"])),
        ],
        title="memory",
    )
    parts = [lifecycle, _render_after_restore(result), paths, ratio, memory]
    if result["peer"] is not None:
        parts.insert(2, _render_peer(result))
    return "\n\n".join(parts)


def _render_peer(result: dict[str, Any]) -> str:
    peer = result["peer"]

    def cell(name: str, unit: str = "ms", digits: int = 1) -> str:
        spread = peer[name]
        return f"{spread['median']:.{digits}f} {unit} ({spread['min']:.{digits}f}-{spread['max']:.{digits}f})"

    ratio = result["ratios"]["restore_and_first_invoke_vs_llama_server_start_and_first_request"]
    rows = [
        ("start -> first healthy answer", cell("ready_ms")),
        ("first request", cell("first_request_ms")),
        ("start + first request", cell("start_to_first_answer_ms")),
        ("first prompt evaluation - warm one", cell("first_prompt_gap_ms")),
        ("first request / warm request", cell("first_over_warm_request", "x", 3)),
        ("snapllm restore + first invoke / this", f"{ratio:.3f}"),
    ]
    return table(
        rows, title=f"llama-server, a new process each time: medians (range) of {result['restores']} starts"
    )


def _render_after_restore(result: dict[str, Any]) -> str:
    def cell(spread: dict[str, float], unit: str = "ms", digits: int = 1) -> str:
        median, low, high = (f"{spread[k]:.{digits}f}" for k in ("median", "min", "max"))
        return f"{median} {unit} ({low}-{high})".replace(" ()", "")

    rows = []
    for mode, figures in result["after_restore"].items():
        rows.append((f"SNAPLLM_PREFAULT={mode}", ""))
        rows.append(("  restore (after-restore hooks)", cell(figures["restore_ms"])))
        rows.append(("  first token - warm first token", cell(figures["first_token_gap_ms"])))
        rows.append(("  first invoke / warm invoke", cell(figures["first_over_warm_invoke"], "x", 3)))
        rows.append(("  first invoke - warm invoke", cell(figures["invoke_gap_ms"])))
        rows.append(("  of it: prompt evaluation", cell(figures["prompt_gap_ms"])))
        rows.append(("  of it: token generation", cell(figures["generation_gap_ms"])))
        rows.append(("  of it: handler outside the engine", cell(figures["outside_engine_gap_ms"])))
        rows.append(
            (
                "  page faults, first / warm invoke",
                cell(figures["first_invoke_page_faults"], "", 0)
                + " / "
                + cell(figures["warm_invoke_page_faults"], "", 0),
            )
        )
    title = f"after a restore: {result['model']}, medians (range) of {result['restores']} restores per mode"
    return table(rows, title=title)
