"""``snapllm bench grammar``: what constraining generation costs, as ratios, on both packaged models.

    snapllm bench grammar --rounds 3
    snapllm bench grammar --peer llama-server        # llama.cpp's own server beside (make llama-server)

Each constrained request runs beside the same prompt free, and the engine times its matcher;
docs/benchmarks.md says how the pairs and the decode rate are counted, and what they measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from snapllm.engine.decode import GrammarCheck
from snapllm.engine.loaded import TILED_MATMUL_VARIABLE
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest
from snapllm.errors import SnapllmError
from snapllm.inference.settings import ServingSettings
from snapllm.protocol.completions.constraints import chat_grammar
from snapllm.protocol.requests import ChatCompletionRequest, parse_request
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import available_cpus
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering
from snapllm_dev.local.report import table
from snapllm_dev.local.s3 import free_port
from snapllm_dev.packaged_models import gemma3_270m_path, smollm2_path

MODELS: dict[str, Callable[[], Path]] = {"smollm2-135m": smollm2_path, "gemma3-270m": gemma3_270m_path}
CITIES = ("Lisbon", "Kyoto")
PROMPT = "Tell me about {city}: its country, the weather there today and one sight to see. Answer in JSON."
PLACE = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "country": {"type": "string", "maxLength": 24},
        "weather": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]},
        "sight": {"type": "string", "maxLength": 80},
    },
    "required": ["city", "country", "weather", "sight"],
    "additionalProperties": False,
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": CITY}}
    for name, description in (
        ("get_weather", "The current weather in a city"),
        ("get_sights", "The sights worth seeing in a city"),
    )
]
CASES: dict[str, dict[str, Any]] = {
    "json_schema": {
        "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE}}
    },
    "json_object": {"response_format": {"type": "json_object"}},
    "tools required": {"tools": TOOLS, "tool_choice": "required"},
    "tools auto": {"tools": TOOLS, "tool_choice": "auto"},
}
#: Builds llama-server once and prints its path (what `make llama-server` runs).
LLAMA_SERVER = Path(__file__).resolve().parents[3] / "scripts" / "build-llama-server.sh"


def body(case: str | None, city: str, tokens: int) -> dict[str, Any]:
    """One request: the prompt about ``city``, constrained as ``case`` says (None: free)."""
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": PROMPT.format(city=city)}],
        "max_tokens": tokens,
        "temperature": 0,
        "seed": 1,
    }
    return {**request, **CASES[case]} if case else request


#: One side's measurement of one request: decode tokens/s, completion tokens, and the share of the decoding
#: time spent in the grammar's matcher (None where the side does not say).
Sample = tuple[float, int, float | None]
#: A side: it sends a request, constrained or (``free``) with the same prompt and no grammar.
Side = Callable[[dict[str, Any], bool], Sample]


def engine_side(
    engine: Engine, serving_settings: ServingSettings, grammar_check: GrammarCheck = "lazy"
) -> Side:
    serving = OpenAIServing(
        engine,
        max_tokens=serving_settings.max_tokens,
        max_prompt_chars=serving_settings.max_prompt_chars,
    )

    def send(request: dict[str, Any], free: bool) -> Sample:
        chat = parse_request(request)
        assert isinstance(chat, ChatCompletionRequest)
        if serving.supports_chat:
            prepared = serving.prepare(chat).engine_request
        else:
            prepared = _as_text_completion(serving, chat, request)
        if free:
            prepared = dataclasses.replace(prepared, grammar=None)
        before = engine.grammar_seconds
        completion = engine.generate(prepared, grammar_check=grammar_check)
        decoding_s = completion.timings.generation_ms / 1000
        share = (engine.grammar_seconds - before) / decoding_s if decoding_s else None
        # Tokens sampled after the first, each one decode: an answer that ended with its end token decoded
        # once more to sample it, which the usage does not count (a free pair cut at the same length never
        # samples one).
        sampled = completion.completion_tokens - 1 + (completion.finish == "stop")
        rate = sampled / decoding_s if decoding_s and sampled > 0 else 0.0
        return rate, completion.completion_tokens, share

    return send


def _as_text_completion(
    serving: OpenAIServing, chat: ChatCompletionRequest, body: dict[str, Any]
) -> EngineRequest:
    """A chat for a model whose GGUF carries no chat template and whose family has none either: the message
    in Gemma's turn format as a text completion, constrained by the grammar the chat would get."""
    message = chat.messages[-1].text()
    prompt = f"<start_of_turn>user\n{message}<end_of_turn>\n<start_of_turn>model\n"
    fields = {key: body[key] for key in ("max_tokens", "temperature", "seed")}
    text = parse_request({"prompt": prompt, **fields, "stop": ["<end_of_turn>"]})
    return dataclasses.replace(serving.prepare(text).engine_request, grammar=chat_grammar(chat)[0])


def peer_side(base_url: str) -> Side:
    def send(request: dict[str, Any], free: bool) -> Sample:
        if free:
            return _peer_free(base_url, request)
        response = httpx.post(f"{base_url}/v1/chat/completions", json=request, timeout=600)
        response.raise_for_status()
        answer = response.json()
        timings = answer.get("timings") or {}
        tokens = int(answer["usage"]["completion_tokens"])
        return _decode_rate(tokens, float(timings.get("predicted_ms") or 0.0)), tokens, None

    return send


def _peer_free(base_url: str, request: dict[str, Any]) -> Sample:
    """llama-server on the prompt its template renders for ``request``, with no grammar."""
    rendered = httpx.post(f"{base_url}/apply-template", json=request, timeout=60)
    rendered.raise_for_status()
    fields = {"n_predict": request["max_tokens"], "temperature": 0, "seed": request["seed"]}
    response = httpx.post(
        f"{base_url}/completion", json={"prompt": rendered.json()["prompt"], **fields}, timeout=600
    )
    response.raise_for_status()
    answer = response.json()
    tokens = int(answer["tokens_predicted"])
    return _decode_rate(tokens, float((answer.get("timings") or {}).get("predicted_ms") or 0.0)), tokens, None


def _decode_rate(tokens: int, predicted_ms: float) -> float:
    """The same rate as the engine's: the tokens after the first per second of generation."""
    return (tokens - 1) / (predicted_ms / 1000.0) if tokens > 1 and predicted_ms else 0.0


def measure(
    sides: dict[str, Side],
    *,
    cases: list[str],
    rounds: int,
    tokens: int,
) -> dict[str, dict[str, Any]]:
    """For each case: each side's median decode rate constrained and free, the median of their ratios pair by
    pair, and the median length of the constrained answers. A constrained request and its free pair run back
    to back: the same prompt, as many tokens as the constrained answer had (a longer answer decodes more
    slowly as its context grows), so the two share the machine's state of the moment. Which of the two runs
    first alternates from round to round, so that neither always follows the other; the free one's length
    is the constrained answer's in the warm-up round (temperature 0 and a seed: the same answer each time)."""
    samples: dict[tuple[str, str], list[tuple[Sample, Sample]]] = {}
    lengths: dict[tuple[str, str, str], int] = {}
    for round_number in range(rounds + 1):
        for case in cases:
            for city in CITIES:  # round 0 warms up, and learns each constrained answer's length
                for name, send in sides.items():
                    key = (case, city, name)
                    if round_number % 2:
                        constrained = send(body(case, city, tokens), False)
                        free = send(body(case, city, lengths[key]), True)
                    else:
                        free = send(body(case, city, lengths[key]), True) if round_number else None
                        constrained = send(body(case, city, tokens), False)
                    lengths[key] = max(2, constrained[1])
                    if free is not None:
                        samples.setdefault((case, name), []).append((constrained, free))
    results: dict[str, dict[str, Any]] = {}
    for case in cases:
        results[case] = {}
        for name in sides:
            pairs = samples[(case, name)]
            ratios = [c[0] / f[0] for c, f in pairs if f[0]]
            shares = [c[2] for c, _ in pairs if c[2] is not None]
            results[case][name] = {
                "grammar_share": statistics.median(shares) if shares else None,
                "constrained_tps": statistics.median(c[0] for c, _ in pairs),
                "free_tps": statistics.median(f[0] for _, f in pairs),
                "ratio": statistics.median(ratios) if ratios else None,
                "tokens_per_answer": statistics.median(c[1] for c, _ in pairs),
            }
    return results


def llama_server_binary(bench: str) -> str:
    """The llama-server binary, built once by ``make llama-server``; ``bench`` names the benchmark in its
    error."""
    built = subprocess.run(["bash", str(LLAMA_SERVER)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise SystemExit(f"bench {bench}: could not build llama-server:\n{built.stderr[-2000:]}")
    return built.stdout.strip().splitlines()[-1]


def server_command(
    binary: str, model: Path, *, port: int, threads: int, n_ctx: int, options: Sequence[str]
) -> list[str]:
    """llama-server's command line on ``model`` at ``port``."""
    return [
        binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
        "-tb", str(threads), "-c", str(n_ctx), *options, "--no-webui", "--log-disable",
    ]  # fmt: skip


def wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, *, bench: str) -> None:
    """Return once llama-server at ``base_url`` answers its health check (polled every 20 ms)."""
    if wait_until_answering(process, f"{base_url}/health", timeout_s=120, interval_s=0.02):
        return
    if process.poll() is not None:
        raise SystemExit(f"bench {bench}: llama-server exited ({process.returncode}) while starting")
    raise SystemExit(f"bench {bench}: llama-server did not start within 120 s")


@contextmanager
def llama_server(
    model: Path,
    *,
    threads: int,
    n_ctx: int,
    options: Sequence[str] = ("-np", "1"),
    bench: str = "grammar",
    environment: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """llama.cpp's server on ``model``, built once by ``make llama-server``, with ``options`` (its slots,
    embedding mode...); yields its base URL. ``bench`` names the benchmark in its errors. It runs with
    llama.cpp's own kernels (without the switch an engine loaded in this process sets), unless
    ``environment`` sets variables of its own."""
    port = free_port()
    command = server_command(
        llama_server_binary(bench), model, port=port, threads=threads, n_ctx=n_ctx, options=options
    )
    env = {name: value for name, value in os.environ.items() if name != TILED_MATMUL_VARIABLE}
    env.update(environment or {})
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, base_url, bench=bench)
        yield base_url
    finally:
        stop_process(process)


def run(args: argparse.Namespace) -> int:
    threads = args.threads or available_cpus()
    cases = args.case or list(CASES)
    results: dict[str, Any] = {"threads": threads, "rounds": args.rounds, "models": {}}
    for model_name in args.model or list(MODELS):
        path = MODELS[model_name]()
        settings = EngineSettings(threads=threads)
        serving_settings = ServingSettings(max_tokens=max(args.tokens, 16))
        try:
            engine = Engine.load(str(path), settings, model_name=model_name)
        except (SnapllmError, OSError, ValueError) as exc:
            print(f"snapllm bench grammar: {exc}", file=sys.stderr)
            return 2
        sides: dict[str, Side] = {"snapllm": engine_side(engine, serving_settings)}
        if args.eager:
            sides["snapllm eager"] = engine_side(engine, serving_settings, "eager")
        with _peer(args.peer, path, threads=threads, n_ctx=settings.n_ctx) as peer_url:
            if peer_url is not None:
                sides["llama-server"] = peer_side(peer_url)
            measured = measure(sides, cases=cases, rounds=args.rounds, tokens=args.tokens)
        results["models"][model_name] = measured
        if not args.json:  # each model's table as soon as it is measured
            print(_table(model_name, measured, rounds=args.rounds, threads=threads), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _table(model_name: str, by_case: dict[str, dict[str, Any]], *, rounds: int, threads: int) -> str:
    rows = []
    for case, by_side in by_case.items():
        for name, side in by_side.items():
            rows.append(
                (
                    f"{case}, {name}",
                    f"constrained/free x{side['ratio']:.2f} ({side['constrained_tps']:.0f} / "
                    f"{side['free_tps']:.0f} tokens/s), {side['tokens_per_answer']:.0f} tokens per answer"
                    + (
                        f", the matcher {side['grammar_share']:.1%} of the decoding"
                        if side["grammar_share"] is not None
                        else ""
                    ),
                )
            )
        if "llama-server" in by_side:
            ours, peer = by_side["snapllm"], by_side["llama-server"]
            speed = ours["constrained_tps"] / peer["constrained_tps"]
            rows.append((f"{case}, snapllm/llama-server", f"constrained tokens/s x{speed:.2f}"))
    title = (
        f"{model_name}: decode rate under a grammar (median of {rounds} rounds x {len(CITIES)} prompts, "
        f"{threads} threads, temperature 0)"
    )
    return table(rows, title=title)


@contextmanager
def _peer(peer: str | None, model: Path, *, threads: int, n_ctx: int) -> Iterator[str | None]:
    """The peer's base URL for the duration (None without a peer)."""
    if peer is None:
        yield None
        return
    with llama_server(model, threads=threads, n_ctx=n_ctx) as url:
        yield url
