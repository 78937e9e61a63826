"""``snapllm bench engine``: decode and prefill tokens/s of the engine, llama.cpp alone, bare
llama-cpp-python and llama-server, at each thread count, as paired ratios to llama-server's defaults.

    snapllm bench engine --side snapllm --side llama-server --loads 4 --rounds 4   # a verdict on one pair
    sudo snapllm bench engine --side snapllm --side llama-server --trace-decode   # where a token's time goes

docs/benchmarks.md ("Engine speed") says what each side runs, how its rates and ratios are taken.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import llama_cpp.llama_cpp as low_level
import numpy as np
from llama_cpp import Llama

from snapllm.engine.loaded import TILED_MATMUL_VARIABLE
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling
from snapllm.errors import SnapllmError
from snapllm.system import available_cpus
from snapllm_dev.bench.grammar import LLAMA_SERVER, MODELS, llama_server
from snapllm_dev.bench.stats import CONFIDENCE, PairedRatio
from snapllm_dev.bench.uprobes import DECODE_SYMBOL, DecodeCalls, DecodeTracer, ProbeUnavailable
from snapllm_dev.local.report import table
from snapllm_dev.packaged_models import model_path

#: The side every ratio is taken against: llama-server as its users run it.
BASELINE = "llama-server"
#: The side the engine's second ratio is taken against: llama.cpp with nothing around it, on the engine's
#: own context (:func:`floor_side`).
FLOOR = "llama.cpp alone"
#: The sides, by the name ``--side`` gives them (:data:`snapllm_dev.bench.arguments.ENGINE_SIDES`; a unit
#: test keeps the two equal), in the order each round runs them.
SIDES = {
    "snapllm": "snapllm",
    "llama.cpp": FLOOR,
    "llama-cpp-python": "llama-cpp-python",
    "engine-kernels": "llama-server (engine kernels)",
    "llama-server": BASELINE,
}
#: The pause after each request: a side's worker threads poll for more work for a while after one (ggml's
#: ``--poll``), and would take cores from the side measured next. On one thread a side has no workers.
SETTLE_S = 0.5


def settle_s(threads: int) -> float:
    """The pause after each request of sides running on ``threads`` threads (:data:`SETTLE_S`)."""
    return SETTLE_S if threads > 1 else 0.0


#: What the prompts are cut from: text a model reads as text, long enough for any prefill.
_TEXT = (
    "Count from one to a thousand: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, "
    "20, 21, 22, 23, 24, 25. The river runs through the valley past the old mill, where the miller "
    "weighs the grain each morning and writes the figures in a ledger kept beside the door. "
)


@dataclass(frozen=True)
class Sample:
    """One request's rate: prompt tokens per second up to the first token, and tokens per second after."""

    prefill_tps: float
    decode_tps: float
    #: The text generated, where the side gives it (the in-process sides): two sides that did the same
    #: work wrote the same text.
    text: str = ""


#: A side runs ``prompt`` and generates ``tokens`` tokens.
Side = Callable[[list[int], int], Sample]


def prompt_tokens(engine: Engine, count: int) -> list[int]:
    """``count`` tokens of text (the model's beginning-of-sequence token first, where it has one)."""
    tokens = engine.tokenize(_TEXT, add_bos=True)
    body = engine.tokenize(_TEXT, add_bos=False)
    while len(tokens) < count:
        tokens += body
    return tokens[:count]


def _end_of_generation(llama: Llama) -> list[int]:
    vocab = llama._model.vocab
    return [token for token in range(llama.n_vocab()) if low_level.llama_vocab_is_eog(vocab, token)]


def engine_side(engine: Engine) -> Side:
    eog = _end_of_generation(engine.llama)

    def run(prompt: list[int], tokens: int) -> Sample:
        sampling = Sampling(0.0, 1.0, seed=1, logit_bias=tuple((token, float("-inf")) for token in eog))
        request = EngineRequest(tuple(prompt), sampling, max_tokens=tokens, reuse_cache=False)
        completion = engine.generate(request)
        timings = completion.timings
        return Sample(len(prompt) / (timings.prompt_ms / 1000.0), timings.tokens_per_second, completion.text)

    return run


def floor_side(engine: Engine) -> Side:
    """llama.cpp with nothing around it: the prompt in ``llama_decode`` batches, then each greedy pick (the
    logits' argmax, end of generation banned as on every side) decoded alone; no sampler chain, no text
    made while generating. It runs on the engine's own context, thread pool and weights, so a round's
    ratio of the engine to it is what the engine's own work per token costs, free of the memory layout
    that moves a load's speed as a whole. What llama-server does per token comes on top of the same
    ``llama_decode``: this side is as fast as any program running this llama.cpp can be."""
    ctx = engine.llama.ctx
    memory = low_level.llama_get_memory(ctx)
    n_batch = int(engine.llama.n_batch)
    banned = _end_of_generation(engine.llama)
    row = ctypes.c_float * engine.n_vocab
    views: dict[int, np.ndarray] = {}  # llama.cpp's logits buffer moves only when it grows

    def decode(tokens: Sequence[int]) -> None:
        batch = (low_level.llama_token * len(tokens))(*tokens)
        code = low_level.llama_decode(ctx, low_level.llama_batch_get_one(batch, len(tokens)))
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")

    def pick() -> int:
        address = ctypes.cast(low_level.llama_get_logits_ith(ctx, -1), ctypes.c_void_p).value or 0
        logits = views.get(address)
        if logits is None:
            logits = views[address] = np.frombuffer(row.from_address(address), dtype=np.single)
        token = int(logits.argmax())
        if token in banned:
            allowed = logits.copy()
            allowed[banned] = -np.inf
            token = int(allowed.argmax())
        return token

    def run(prompt: list[int], tokens: int) -> Sample:
        pool = engine.thread_pool.running() if engine.thread_pool else contextlib.nullcontext()
        with pool:
            # The engine starts each of the benchmark's requests afresh, so it never reads what this left.
            low_level.llama_memory_clear(memory, False)
            started = time.perf_counter()
            for start in range(0, len(prompt), n_batch):
                decode(prompt[start : start + n_batch])
            generated = [pick()]
            first = time.perf_counter()
            while len(generated) < tokens:
                decode(generated[-1:])
                generated.append(pick())
            last = time.perf_counter()
        decode_tps = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
        text = engine.detokenize(generated).decode("utf-8", errors="replace")
        return Sample(len(prompt) / (first - started), decode_tps, text)

    return run


def llama_cpp_side(llama: Llama) -> Side:
    eog = dict.fromkeys(_end_of_generation(llama), float("-inf"))

    def run(prompt: list[int], tokens: int) -> Sample:
        llama.reset()  # no prefix reused from the last request
        started = time.perf_counter()
        first: float | None = None
        last = started
        stream = llama.create_completion(
            prompt, max_tokens=tokens, temperature=0.0, logit_bias=eog, stream=True
        )
        for _ in stream:
            last = time.perf_counter()
            first = first or last
        first = first or last
        # A chunk per token; the first chunk ends the prompt's evaluation.
        decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
        return Sample(len(prompt) / (first - started), decode)

    return run


def server_side(base_url: str) -> Side:
    def run(prompt: list[int], tokens: int) -> Sample:
        body = {
            "prompt": prompt,
            "n_predict": tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "cache_prompt": False,
        }
        response = httpx.post(f"{base_url}/completion", json=body, timeout=600)
        response.raise_for_status()
        timings = response.json()["timings"]
        generated, predicted_ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
        # The engine's definition: the tokens after the first, per second after it.
        decode = (generated - 1) / (predicted_ms / 1000.0) if generated > 1 and predicted_ms else 0.0
        return Sample(float(timings["prompt_n"]) / (float(timings["prompt_ms"]) / 1000.0), decode)

    return run


def built_llama_server() -> str | None:
    """The llama-server binary ``make llama-server`` built, or None where it is not built yet."""
    found = subprocess.run(
        ["bash", str(LLAMA_SERVER), "--if-built"], capture_output=True, text=True, check=False
    )
    return found.stdout.strip().splitlines()[-1] if found.returncode == 0 and found.stdout.strip() else None


def server_options(settings: EngineSettings) -> dict[str, list[str]]:
    """Each llama-server side's options beyond the model, threads and context."""
    common = ["-np", "1", "-b", str(settings.n_batch)]
    kernels = ["-fa", "on", "-ctv", settings.cache_type_v] if settings.flash_attention else ["-fa", "off"]
    if not settings.repack_weights:
        kernels.append("--no-repack")
    return {"llama-server (engine kernels)": [*common, *kernels], BASELINE: common}


#: What each side measures.
KINDS = ("decode", "prefill")
#: Each side's rates, one per measured round, and the load each round ran on:
#: ``{"decode_tps": [...], "prefill_tps": [...], "load": [...]}``.
Rounds = dict[str, list[float]]


def measure(
    sides: dict[str, Side],
    *,
    decode_prompt: list[int],
    prefill_prompt: list[int],
    tokens: int,
    rounds: int,
    settle: float,
    load: int = 0,
    tracer: DecodeTracer | None = None,
) -> dict[str, Rounds]:
    """Each side's decode and prefill rates in each of ``rounds`` interleaved rounds (after a warm-up), on
    the sides' ``load``-th load; with a ``tracer``, also where each decode request's time per token went
    (``decode_inside_ms`` and ``decode_outside_ms`` a generated token, ``prefill_inside_ms`` and
    ``prefill_outside_ms`` a prompt). ``settle``: the seconds paused after each request (:func:`settle_s`)."""
    measured: dict[str, Rounds] = {name: {"decode_tps": [], "prefill_tps": [], "load": []} for name in sides}
    for round_number in range(rounds + 1):
        order = list(sides) if round_number % 2 else list(reversed(sides))
        for name in order:
            run = sides[name]
            decoded, decode_calls = _traced(tracer, lambda run=run: run(decode_prompt, tokens))
            time.sleep(settle)
            filled, prefill_calls = _traced(tracer, lambda run=run: run(prefill_prompt, 1))
            time.sleep(settle)
            if not round_number:  # round 0 warms each side up
                continue
            rates = measured[name]
            rates["decode_tps"].append(decoded.decode_tps)
            rates["prefill_tps"].append(filled.prefill_tps)
            rates["load"].append(load)
            if decode_calls is not None and prefill_calls is not None:
                split = decode_calls.split()
                if split is None or not prefill_calls.entries:
                    raise ValueError(f"{name}'s decodes were not traced (is it llama.cpp's {DECODE_SYMBOL}?)")
                prompt_ms = len(prefill_prompt) / filled.prefill_tps * 1000.0
                for key, value in (
                    ("decode_inside_ms", split.inside_ms),
                    ("decode_outside_ms", split.outside_us / 1000.0),
                    ("prefill_inside_ms", prefill_calls.inside_ms()),
                    ("prefill_outside_ms", prompt_ms - prefill_calls.inside_ms()),
                ):
                    rates.setdefault(key, []).append(value)
    return measured


def _traced(tracer: DecodeTracer | None, run: Callable[[], Sample]) -> tuple[Sample, DecodeCalls | None]:
    return (run(), None) if tracer is None else tracer.calls(run)


def _split_ratio(rates: Rounds, baseline: Rounds | None) -> dict[str, Any]:
    """Where decodes were traced, for decode (a generated token) and prefill (the prompt): the side's
    median time in llama.cpp's decode and outside it, and its rate over :data:`BASELINE`'s had the
    baseline's decodes taken as long as its own: each round's ``(inside + baseline's outside) / (inside +
    outside)``, summarized as a ratio. The kernels are the same on every side, and the noise of a shared
    host is in their time; what is left is what the programs themselves make of the speed."""
    result: dict[str, Any] = {}
    for kind in KINDS:
        inside, outside = rates.get(f"{kind}_inside_ms"), rates.get(f"{kind}_outside_ms")
        if inside is None or outside is None:
            continue
        result[f"{kind}_inside_ms"] = statistics.median(inside)
        result[f"{kind}_outside_ms"] = statistics.median(outside)
        theirs = baseline.get(f"{kind}_outside_ms") if baseline else None
        if theirs is not None:
            paired = PairedRatio.of(
                [i + o for i, o in zip(inside, theirs, strict=True)],
                [i + o for i, o in zip(inside, outside, strict=True)],
                loads=rates.get("load"),
            )
            result[f"{kind}_split_ratio"] = paired.median
            result[f"{kind}_split_ratio_interval"] = list(paired.interval)
    return result


def _paired(rates: Rounds, reference: Rounds | None, prefix: str) -> dict[str, Any]:
    """``rates``' ratios to ``reference`` (None without it), decode and prefill: the median of the rounds'
    ratios, their quartiles and the interval the median lies in (:class:`PairedRatio`, over the loads)."""
    result: dict[str, Any] = {}
    for kind in KINDS:
        bases = reference[f"{kind}_tps"] if reference else []
        paired = PairedRatio.of(rates[f"{kind}_tps"], bases, loads=rates.get("load")) if any(bases) else None
        result[f"{kind}_{prefix}"] = paired.median if paired else None
        result[f"{kind}_{prefix}_quartiles"] = list(paired.quartiles) if paired else None
        result[f"{kind}_{prefix}_interval"] = list(paired.interval) if paired else None
    return result


def with_ratios(measured: dict[str, Rounds]) -> dict[str, dict[str, Any]]:
    """Each side's median rates, its ratios to :data:`BASELINE` (``decode_ratio``...) and, for every side
    but it, to :data:`FLOOR` (``decode_floor_ratio``...), None where that side was not measured; and the
    rounds themselves."""
    results: dict[str, dict[str, Any]] = {}
    for name, rates in measured.items():
        result: dict[str, Any] = {f"{kind}_tps": statistics.median(rates[f"{kind}_tps"]) for kind in KINDS}
        result |= _paired(rates, measured.get(BASELINE), "ratio")
        result |= _paired(rates, measured.get(FLOOR) if name != FLOOR else None, "floor_ratio")
        result |= _split_ratio(rates, measured.get(BASELINE))
        result["rounds"] = rates
        results[name] = result
    return results


def _ratio(side: dict[str, Any], kind: str, prefix: str, digits: int) -> str:
    low, high = side[f"{kind}_{prefix}_interval"]
    return f"x{side[f'{kind}_{prefix}']:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def _ratios(side: dict[str, Any], prefix: str, reference: str, *, digits: int = 2) -> str:
    """``x1.01 [0.98-1.03] / x0.99 [0.97-1.00] of <reference>`` (decode / prefill), or "" without it."""
    if side.get(f"decode_{prefix}") is None or side.get(f"prefill_{prefix}") is None:
        return ""
    decode, prefill = (_ratio(side, kind, prefix, digits) for kind in KINDS)
    return f"{decode} / {prefill} of {reference}"


def _split(side: dict[str, Any]) -> str:
    """``in llama.cpp's decode 19.30 ms a token + 0.248 ms outside, 512.3 ms a prompt + 1.2 ms outside;
    at equal decode time x1.020 [1.015-1.024] / x1.001 [1.000-1.002] of llama-server``"""
    decode = f"{side['decode_inside_ms']:.2f} ms a token + {side['decode_outside_ms']:.3f} ms outside"
    prefill = f"{side['prefill_inside_ms']:.1f} ms a prompt + {side['prefill_outside_ms']:.1f} ms outside"
    text = f"in llama.cpp's decode {decode}, {prefill}"
    if "decode_split_ratio" not in side or "prefill_split_ratio" not in side:
        return text
    return f"{text}; at equal decode time {_ratios(side, 'split_ratio', BASELINE, digits=3)}"


def render(model: str, by_threads: dict[int, dict[str, dict[str, Any]]], *, note: str) -> str:
    rows = []
    for threads, by_side in by_threads.items():
        for name, side in by_side.items():
            ratios = [_ratios(side, "ratio", BASELINE), _ratios(side, "floor_ratio", FLOOR)]
            rates = f"decode {side['decode_tps']:.1f} tokens/s, prefill {side['prefill_tps']:.1f} tokens/s"
            rows.append((f"{threads} threads, {name}", "  ".join([rates, *filter(None, ratios)])))
            if "decode_outside_ms" in side:
                rows.append(("", _split(side)))
    return table(rows, title=f"{model}: {note}")


@contextlib.contextmanager
def _sides(
    path: Path, settings: EngineSettings, server: str | None, chosen: Collection[str], *, model_name: str
) -> Iterator[tuple[Engine, dict[str, Side]]]:
    """The engine (which every side's prompts are tokenized with), and each ``chosen`` side loaded (or
    started) on ``path`` with ``settings``' threads, in :data:`SIDES`' order; closed afterwards."""
    threads = settings.threads or 1
    engine = Engine.load(str(path), settings, model_name=model_name)
    sides: dict[str, Side] = {}
    with contextlib.ExitStack() as loaded:
        loaded.callback(engine.close)
        if "snapllm" in chosen:
            sides["snapllm"] = engine_side(engine)
        if FLOOR in chosen:
            sides[FLOOR] = floor_side(engine)
        if "llama-cpp-python" in chosen:
            llama = Llama(
                model_path=str(path),
                n_ctx=settings.n_ctx,
                n_batch=settings.n_batch,
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
            loaded.callback(llama.close)
            sides["llama-cpp-python"] = llama_cpp_side(llama)
        for name, options in server_options(settings).items():
            if server is not None and name in chosen:
                # The engine's kernels include its switch off of ggml's tiled K-quant kernel.
                environment = {TILED_MATMUL_VARIABLE: "0"} if name != BASELINE else None
                url = loaded.enter_context(
                    llama_server(
                        path,
                        threads=threads,
                        n_ctx=settings.n_ctx,
                        options=options,
                        bench="engine",
                        environment=environment,
                    )
                )
                sides[name] = server_side(url)
        yield engine, sides


def run(args: argparse.Namespace) -> int:
    thread_counts = args.threads or list(range(1, available_cpus() + 1))
    chosen = [SIDES[key] for key in args.side] if args.side else list(SIDES.values())
    wants_server = not args.no_server and any(name.startswith("llama-server") for name in chosen)
    server = built_llama_server() if wants_server else None
    if server is None and wants_server:
        print(
            "snapllm bench engine: llama-server is not built (make llama-server): measuring the other sides",
            file=sys.stderr,
        )
    if not any(server is not None or not name.startswith("llama-server") for name in chosen):
        print("snapllm bench engine: no side to measure: each one asked for is llama-server", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "decode_tokens": args.decode_tokens,
        "rounds": args.rounds,
        "loads": args.loads,
        "confidence": CONFIDENCE,
        "baseline": BASELINE,
        "models": {},
    }
    try:
        with _tracer(server) if args.trace_decode else contextlib.nullcontext() as tracer:
            code = _measure_models(args, thread_counts, chosen, server, results, tracer)
    except ProbeUnavailable as exc:
        print(f"snapllm bench engine: --trace-decode: {exc}", file=sys.stderr)
        return 2
    if code:
        return code
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _tracer(server: str | None) -> DecodeTracer:
    """Probes on llama.cpp's decode in the library llama-cpp-python loaded (the in-process sides') and in
    the llama-server binary."""
    return DecodeTracer([Path(low_level._lib._name), *([Path(server)] if server else [])])


def _measure_models(
    args: argparse.Namespace,
    thread_counts: list[int],
    chosen: list[str],
    server: str | None,
    results: dict[str, Any],
    tracer: DecodeTracer | None,
) -> int:
    """Each model's table (printed) and results (into ``results``); 2 where a side could not run."""
    for model_name in args.model or list(MODELS):
        try:
            path = model_path(model_name)
        except SnapllmError as exc:
            print(f"snapllm bench engine: {exc}", file=sys.stderr)
            return 2
        by_threads: dict[int, dict[str, dict[str, Any]]] = {}
        for threads in thread_counts:
            settings = EngineSettings(threads=threads)
            measured: dict[str, Rounds] = {}
            try:
                for load in range(args.loads):
                    with _sides(path, settings, server, chosen, model_name=model_name) as (engine, sides):
                        # The prefill and the one token after it fit the context.
                        prefill = prompt_tokens(engine, min(args.prefill_tokens, settings.n_ctx - 2))
                        decode = prompt_tokens(engine, args.decode_prompt)
                        once = measure(
                            sides,
                            decode_prompt=decode,
                            prefill_prompt=prefill,
                            tokens=min(args.decode_tokens, settings.n_ctx - len(decode) - 1),
                            rounds=args.rounds,
                            load=load,
                            tracer=tracer,
                            settle=settle_s(threads),
                        )
                    for name, rates in once.items():
                        for key, values in rates.items():
                            measured.setdefault(name, {}).setdefault(key, []).extend(values)
            except (SnapllmError, OSError, ValueError) as exc:
                print(f"snapllm bench engine: {exc}", file=sys.stderr)
                return 2
            by_threads[threads] = with_ratios(measured)
        results["models"][model_name] = {
            "path": str(path),
            "prefill_tokens": len(prefill),
            "decode_prompt_tokens": len(decode),
            "threads": {str(threads): sides for threads, sides in by_threads.items()},
        }
        loads = f"{args.loads} loads of {args.rounds} rounds" if args.loads > 1 else f"{args.rounds} rounds"
        note = (
            f"decode {args.decode_tokens} tokens after {len(decode)}, prefill {len(prefill)} tokens "
            f"(median of {loads}; ratios: the median of each round's "
            f"[its {CONFIDENCE:.0%} interval])"
        )
        print(render(model_name, by_threads, note=note), flush=True)
    return 0
