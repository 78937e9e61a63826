"""``snapllm bench engine``: decode and prefill tokens/s of the engine, bare llama-cpp-python and
llama-server, at each thread count, as ratios to llama-server as its users run it.

    snapllm bench engine                                           # the packaged models, 1..cores threads
    snapllm bench engine --model llama3.2-1b.gguf --threads 1,2,6 --json engine.json
    snapllm bench engine --side snapllm --side llama-server --loads 4 --rounds 4   # a verdict on one pair

Four sides run the same token ids on the same model file, with the same threads:

- ``snapllm``: the engine (:class:`snapllm.engine.model.Engine`) with its default settings;
- ``llama-cpp-python``: ``Llama`` as its users construct it (its own defaults), streamed;
- ``llama-server (engine kernels)``: llama.cpp's server with the engine's repacking, flash attention and
  value cache type;
- ``llama-server``: llama.cpp's server with its own defaults (repacking on, flash attention auto).

Both servers run one slot (``-np 1``, so the context is not split) with the engine's context and batch,
and are compiled by ``make llama-server`` from the llama.cpp that llama-cpp-python vendors; a machine
where it is not built yet measures the other sides (this command never starts the 10-15 minute build).

**Decode**: ``--decode-tokens`` tokens (end of generation banned, so every side generates them all) after
a ``--decode-prompt``-token prompt; the rate counts the tokens after the first, over the time after it.
**Prefill**: a ``--prefill-tokens`` prompt (at most what the context leaves) and one token; the rate is the
prompt's tokens over the time to the first token. No side reuses a cached prompt.

**Ratios are paired.** Each round runs every side in turn (in reverse order every other round, so that no
side always runs next to the baseline), and a side's ratio in that round is its rate over the baseline's
in the same round: a machine whose speed drifts by 10% over a minute (a shared host's does) moves both.
A rate is the median of the rounds after each load's warm-up; a ratio is the median of the rounds'
ratios, shown with the interval it lies in with 95% confidence (``x1.01 [0.98-1.03]``): a difference
inside that interval is the machine's noise, not the software's.

**Loads** (``--loads``): each side is loaded afresh that many times (the engine and llama-cpp-python in
this process, a new llama-server process), ``--rounds`` rounds each. A load's memory layout (its
buffers, the physical pages under them) moves its speed for as long as it runs, which more rounds of the
same load cannot average out; the interval resamples loads as well as rounds (:class:`PairedRatio`).
``--side`` picks the sides (all by default). Timing threads on cores that something else uses is
meaningless (ggml's workers spin-wait on each other): run it on an idle machine, at thread counts up to
its cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling
from snapllm.errors import SnapllmError
from snapllm.system import available_cpus
from snapllm_dev.bench.grammar import LLAMA_SERVER, MODELS, llama_server
from snapllm_dev.bench.stats import CONFIDENCE, PairedRatio
from snapllm_dev.local.report import table

#: The side every ratio is taken against: llama-server as its users run it.
BASELINE = "llama-server"
#: The sides, by the name ``--side`` gives them (:data:`snapllm_dev.bench.arguments.ENGINE_SIDES`; a unit
#: test keeps the two equal), in the order each round runs them.
SIDES = {
    "snapllm": "snapllm",
    "llama-cpp-python": "llama-cpp-python",
    "engine-kernels": "llama-server (engine kernels)",
    "llama-server": BASELINE,
}
#: The pause after each request: a llama-server's workers poll for more work for a while after one (ggml's
#: ``--poll``), and would take cores from the side measured next.
SETTLE_S = 0.5
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
        timings = engine.generate(request).timings
        return Sample(len(prompt) / (timings.prompt_ms / 1000.0), timings.tokens_per_second)

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
    load: int = 0,
) -> dict[str, Rounds]:
    """Each side's decode and prefill rates in each of ``rounds`` interleaved rounds (after a warm-up), on
    the sides' ``load``-th load."""
    measured: dict[str, Rounds] = {name: {"decode_tps": [], "prefill_tps": [], "load": []} for name in sides}
    for round_number in range(rounds + 1):
        order = list(sides) if round_number % 2 else list(reversed(sides))
        for name in order:
            decoded = sides[name](decode_prompt, tokens)
            time.sleep(SETTLE_S)
            filled = sides[name](prefill_prompt, 1)
            time.sleep(SETTLE_S)
            if round_number:  # round 0 warms each side up
                measured[name]["decode_tps"].append(decoded.decode_tps)
                measured[name]["prefill_tps"].append(filled.prefill_tps)
                measured[name]["load"].append(load)
    return measured


def with_ratios(measured: dict[str, Rounds]) -> dict[str, dict[str, Any]]:
    """Each side's median rates, and its ratios to :data:`BASELINE` (None without it): the median of the
    rounds' ratios, with their quartiles and the interval the median lies in (:class:`PairedRatio`, over
    the rounds' loads); and the rounds themselves."""
    baseline = measured.get(BASELINE)
    results: dict[str, dict[str, Any]] = {}
    for name, rates in measured.items():
        result: dict[str, Any] = {}
        for kind in ("decode", "prefill"):
            values = rates[f"{kind}_tps"]
            result[f"{kind}_tps"] = statistics.median(values)
            bases = baseline[f"{kind}_tps"] if baseline else []
            paired = PairedRatio.of(values, bases, loads=rates.get("load")) if any(bases) else None
            result[f"{kind}_ratio"] = paired.median if paired else None
            result[f"{kind}_ratio_quartiles"] = list(paired.quartiles) if paired else None
            result[f"{kind}_ratio_interval"] = list(paired.interval) if paired else None
        result["rounds"] = rates
        results[name] = result
    return results


def _ratio(side: dict[str, Any], kind: str) -> str:
    low, high = side[f"{kind}_ratio_interval"]
    return f"x{side[f'{kind}_ratio']:.2f} [{low:.2f}-{high:.2f}]"


def render(model: str, by_threads: dict[int, dict[str, dict[str, Any]]], *, note: str) -> str:
    rows = []
    for threads, by_side in by_threads.items():
        for name, side in by_side.items():
            ratios = (
                f"  {_ratio(side, 'decode')} / {_ratio(side, 'prefill')} of {BASELINE}"
                if side["decode_ratio"] is not None and side["prefill_ratio"] is not None
                else ""
            )
            rates = f"decode {side['decode_tps']:.1f} tokens/s, prefill {side['prefill_tps']:.1f} tokens/s"
            rows.append((f"{threads} threads, {name}", rates + ratios))
    return table(rows, title=f"{model}: {note}")


def _model_path(name: str) -> Path:
    return MODELS[name]() if name in MODELS else Path(name)


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
                url = loaded.enter_context(
                    llama_server(path, threads=threads, n_ctx=settings.n_ctx, options=options, bench="engine")
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
    for model_name in args.model or list(MODELS):
        path = _model_path(model_name)
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
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
