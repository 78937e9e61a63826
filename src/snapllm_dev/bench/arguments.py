"""The arguments of ``snapllm bench ...``, declared without importing the benchmarks (llama_cpp, boto3, the
local stack): a usage error costs no start-up. Each benchmark's module has the ``run(args)`` it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm_dev.argtypes import gguf_file, http_url, integer, integers, number, readable_file

#: ``SNAPLLM_PREFAULT``'s modes (:data:`snapllm.engine.prefault.PREFAULT_MODES`, which imports numpy; a
#: unit test
#: keeps the two equal).
PREFAULT_CHOICES = ("none", "weights", "all")
#: The router benchmark's p99 budget for the router's own work, in ms.
DEFAULT_BUDGET_MS = 10.0
#: The most rounds, invokes or requests a benchmark takes (a bound on how long one run may hold the CPU).
MAX_REPEATS = 100_000
#: The most tokens a benchmark request generates.
MAX_BENCH_TOKENS = 4096
#: The grammar benchmark's models and cases, and the speculative benchmark's cases and sides (the
#: benchmarks' own tables, :data:`snapllm_dev.bench.grammar.MODELS` / ``CASES`` and
#: :data:`snapllm_dev.bench.speculative.CASES` / ``SNAPLLM_SIDES`` / ``SERVER_SIDES`` / ``DRAFT_SIDE``,
#: import llama_cpp; a unit test keeps them equal).
GRAMMAR_MODELS = ("gemma3-270m", "smollm2-135m")
GRAMMAR_CASES = ("json_object", "json_schema", "tools auto", "tools required")
SPECULATIVE_CASES = ("edit", "rag", "json", "chat")
SPECULATIVE_SIDES = (
    "snapllm off",
    "snapllm lookup",
    "snapllm auto",
    "llama-server",
    "llama-server ngram-simple",
    "llama-server draft",
)
#: The engine benchmark's sides (:data:`snapllm_dev.bench.engine.SIDES`, which imports llama_cpp; a unit test
#: keeps them equal).
ENGINE_SIDES = ("snapllm", "llama.cpp", "llama-cpp-python", "engine-kernels", "llama-server")
#: The most times the engine benchmark loads each side afresh.
MAX_LOADS = 100


def model_or_gguf(text: str) -> str:
    """A packaged model's name (checked when the benchmark runs), or the path of a GGUF file."""
    if "/" in text or text.endswith(".gguf") or Path(text).exists():
        return str(gguf_file(text))
    return text


def _decoding_run(parser: argparse.ArgumentParser, *, rounds: int) -> None:
    """The arguments of a benchmark that decodes the same prompts on one loaded model per side."""
    parser.add_argument(
        "--rounds",
        type=integer(1, MAX_REPEATS),
        default=rounds,
        help="measured rounds per prompt (after one warm-up)",
    )
    parser.add_argument(
        "--tokens", type=integer(1, MAX_BENCH_TOKENS), default=96, help="max_tokens of every request"
    )
    parser.add_argument(
        "--threads", type=integer(1, 1024), default=None, help="llama.cpp threads (default: all cores)"
    )


def add_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmarks that report side-by-side ratios")
    kinds = bench.add_subparsers(dest="bench", required=True)
    repeats = integer(1, MAX_REPEATS)

    coldstart = kinds.add_parser(
        "coldstart", help="cold-start phases and ratios against vanilla and bare llama_cpp"
    )
    coldstart.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    coldstart.add_argument(
        "--model",
        type=model_or_gguf,
        default="smollm2-135m",
        help="GGUF file, or a packaged model: gemma3-270m, smollm2-135m (default smollm2-135m)",
    )
    coldstart.add_argument("--rounds", type=repeats, default=3, help="load rounds per path (median reported)")
    coldstart.add_argument(
        "--invokes", type=repeats, default=7, help="warm invokes per side (median reported)"
    )
    coldstart.add_argument(
        "--restores",
        type=repeats,
        default=5,
        help="restored environments per prefault mode (median reported)",
    )
    coldstart.add_argument(
        "--prefault",
        nargs="+",
        choices=PREFAULT_CHOICES,
        default=list(PREFAULT_CHOICES),
        help="SNAPLLM_PREFAULT modes to measure after a restore (default: all of them)",
    )
    coldstart.add_argument(
        "--peer",
        choices=["llama-server"],
        help="also start llama.cpp's server on the model --restores times: its start and first request",
    )
    coldstart.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    coldstart.add_argument(
        "--faults",
        action="store_true",
        help="instead: the S3 -> memfd load, clean vs each transient fault (reset, close, 503, stall)",
    )
    coldstart.set_defaults(implementation="snapllm_dev.bench.coldstart")

    router = kinds.add_parser("router", help="router overhead per request (all but inference), p50/p99")
    router.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    router.add_argument("--model", type=gguf_file, help="GGUF file (default: the packaged SmolLM2)")
    router.add_argument("--requests", type=repeats, default=200, help="measured requests (after 20 warm-ups)")
    router.add_argument(
        "--budget-ms",
        type=number(0, 60_000, above_minimum=True),
        default=DEFAULT_BUDGET_MS,
        help="p99 budget (exit 1 above)",
    )
    router.add_argument(
        "--max-tokens", type=integer(1, MAX_BENCH_TOKENS), default=1, help="tokens each request generates"
    )
    router.add_argument(
        "--endpoint",
        type=http_url,
        help="also route `always-on` to this OpenAI-compatible base URL and measure both",
    )
    router.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    router.set_defaults(implementation="snapllm_dev.bench.router")

    aws = kinds.add_parser("aws", help="cold/warm/streaming latency of a deployed stack (REPORT lines)")
    aws.add_argument("--stack", required=True, help="CloudFormation stack name")
    aws.add_argument("--region", help="AWS region (default: the session's)")
    aws.add_argument("--function", default="InferenceFunction", help="logical id of the function")
    aws.add_argument(
        "--cold", type=integer(0, 1000), default=3, help="cold starts (each publishes a version)"
    )
    aws.add_argument("--warm", type=integer(0, MAX_REPEATS), default=10, help="warm invokes")
    aws.add_argument("--stream", type=integer(0, MAX_REPEATS), default=3, help="streaming requests (0: skip)")
    aws.add_argument(
        "--budget-usd", type=number(0, 1e6), default=2.0, help="ask before spending more than this"
    )
    aws.add_argument("--yes", action="store_true", help="approve spending over the budget")
    aws.add_argument(
        "--prefault",
        choices=PREFAULT_CHOICES,
        help="SNAPLLM_PREFAULT for the cold versions (default: the function's own setting)",
    )
    aws.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    aws.set_defaults(implementation="snapllm_dev.bench.aws")

    grammar = kinds.add_parser("grammar", help="decode rate constrained/free on both models, as ratios")
    grammar.add_argument(
        "--model", choices=GRAMMAR_MODELS, action="append", help="only this packaged model (repeatable)"
    )
    grammar.add_argument("--case", choices=GRAMMAR_CASES, action="append", help="only this case (repeatable)")
    _decoding_run(grammar, rounds=3)
    grammar.add_argument(
        "--peer", choices=["llama-server"], help="measure llama.cpp's server in the same run"
    )
    grammar.add_argument("--eager", action="store_true", help="also measure the grammar applied eagerly")
    grammar.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    grammar.set_defaults(implementation="snapllm_dev.bench.grammar")

    schemas = kinds.add_parser(
        "schemas", help="JSON schemas served, valid instances accepted, invalid stopped (JSONSchemaBench)"
    )
    schemas.add_argument("dir", type=Path, help="a folder of JSONSchemaBench cases (<Dataset>---<id>.json)")
    schemas.add_argument("--dataset", action="append", help="only this dataset (repeatable)")
    schemas.add_argument(
        "--byte-masks", action="store_true", help="time masks over a byte vocabulary (no tokenizer fetched)"
    )
    schemas.add_argument("--no-mask", action="store_true", help="do not time masks")
    schemas.add_argument("-v", "--verbose", action="store_true", help="list refusals and misses")
    schemas.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    schemas.set_defaults(implementation="snapllm_dev.bench.schemas")

    embeddings = kinds.add_parser(
        "embeddings", help="/v1/embeddings inputs/s for a batch of short texts, against llama-server"
    )
    embeddings.add_argument(
        "--model",
        type=model_or_gguf,
        default="smollm2-135m",
        help="a packaged model's name or an embedding GGUF file",
    )
    embeddings.add_argument(
        "--pooling",
        choices=["model", "mean", "cls", "last"],
        default="mean",
        help="how the model pools its tokens (model: the GGUF's own pooling type)",
    )
    embeddings.add_argument(
        "--inputs", type=integer(1, 2048), default=32, help="texts in each request (default 32)"
    )
    embeddings.add_argument(
        "--rounds",
        type=integer(1, MAX_REPEATS),
        default=5,
        help="measured requests per side (after a warm-up)",
    )
    embeddings.add_argument("--n-ctx", type=integer(16, 131_072), default=2048, help="context window, tokens")
    embeddings.add_argument(
        "--threads", type=integer(1, 1024), default=None, help="llama.cpp threads (default: all cores)"
    )
    embeddings.add_argument(
        "--peer", choices=["llama-server"], help="measure llama.cpp's server in the same run"
    )
    embeddings.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    embeddings.set_defaults(implementation="snapllm_dev.bench.embeddings")

    engine = kinds.add_parser(
        "engine",
        help="decode and prefill tokens/s: the engine, llama-cpp-python and llama-server, as ratios",
    )
    engine.add_argument(
        "--model",
        type=model_or_gguf,
        action="append",
        help="a packaged model's name or a GGUF file (repeatable; default: the packaged models)",
    )
    engine.add_argument(
        "--threads",
        type=integers(1, 1024),
        default=None,
        help="thread counts to measure, comma-separated (default: 1 to all cores)",
    )
    engine.add_argument(
        "--decode-tokens", type=integer(2, MAX_BENCH_TOKENS), default=128, help="tokens each decode generates"
    )
    engine.add_argument(
        "--decode-prompt", type=integer(1, MAX_BENCH_TOKENS), default=40, help="tokens of the decode's prompt"
    )
    engine.add_argument(
        "--prefill-tokens",
        type=integer(1, 131_072),
        default=1000,
        help="tokens of the prefill's prompt (at most what the context leaves)",
    )
    engine.add_argument(
        "--rounds",
        type=integer(1, MAX_REPEATS),
        default=5,
        help="measured rounds per load (after one warm-up); each ratio is the median of the rounds' ratios",
    )
    engine.add_argument(
        "--loads",
        type=integer(1, MAX_LOADS),
        default=1,
        help="how many times each side is loaded afresh (a process's memory layout moves its speed)",
    )
    engine.add_argument(
        "--side",
        choices=ENGINE_SIDES,
        action="append",
        help="a side to measure (repeatable; default: all; llama-server is the ratios' baseline)",
    )
    engine.add_argument(
        "--no-server",
        action="store_true",
        help="leave llama-server out (measure the engine and llama-cpp-python)",
    )
    engine.add_argument(
        "--trace-decode",
        action="store_true",
        help="time each decode inside llama.cpp with uprobes (root, tracefs): a token's time in llama.cpp's "
        "decode and outside it, for every side",
    )
    engine.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    engine.set_defaults(implementation="snapllm_dev.bench.engine")

    speculative = kinds.add_parser(
        "speculative", help="decode tokens/s with speculative decoding, snapllm and llama-server, as ratios"
    )
    speculative.add_argument(
        "--model",
        type=model_or_gguf,
        default="qwen2.5-coder-1.5b",
        help="a packaged model's name or a GGUF file (default qwen2.5-coder-1.5b)",
    )
    speculative.add_argument(
        "--draft-model",
        type=model_or_gguf,
        default=None,
        help="a draft model of the same tokenizer for llama-server's -md side (e.g. qwen2.5-coder-0.5b)",
    )
    speculative.add_argument(
        "--case", choices=SPECULATIVE_CASES, action="append", help="only this case (repeatable)"
    )
    speculative.add_argument(
        "--side", choices=SPECULATIVE_SIDES, action="append", help="only this side (repeatable)"
    )
    speculative.add_argument(
        "--threads",
        type=integers(1, 1024),
        default=None,
        help="thread counts to measure, comma-separated (default: all cores)",
    )
    speculative.add_argument(
        "--rounds",
        type=integer(1, MAX_REPEATS),
        default=3,
        help="measured rounds per case (after one warm-up)",
    )
    speculative.add_argument(
        "--tokens", type=integer(2, MAX_BENCH_TOKENS), default=192, help="max_tokens of every request"
    )
    speculative.add_argument(
        "--n-ctx", type=integer(256, 131_072), default=4096, help="context window, tokens"
    )
    speculative.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    speculative.set_defaults(implementation="snapllm_dev.bench.speculative")

    prefixes = kinds.add_parser(
        "prefixes", help="time to first token with declared and cached prompt prefixes, as ratios"
    )
    prefixes.add_argument(
        "--model", type=model_or_gguf, default="smollm2-135m", help="a packaged model's name or a GGUF file"
    )
    prefixes.add_argument(
        "--rounds", type=integer(1, MAX_REPEATS), default=3, help="measured rounds (after one warm-up)"
    )
    prefixes.add_argument(
        "--threads", type=integer(1, 1024), default=None, help="llama.cpp threads (default: all cores)"
    )
    prefixes.add_argument(
        "--peer", choices=["llama-server"], help="measure llama.cpp's server in the same run"
    )
    prefixes.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    prefixes.set_defaults(implementation="snapllm_dev.bench.prefixes")
