"""The arguments of ``snapllm eval ...``, declared without importing the evaluations (bfcl-eval, httpx, the
local stack): a usage error costs no start-up. Each evaluation's module has the ``run(args)`` it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm_dev.argtypes import integer, named_url, number
from snapllm_dev.bench.arguments import model_or_gguf

#: BFCL's categories by the name ``--category`` gives them (:data:`snapllm_dev.eval.bfcl.CATEGORIES`'
#: keys, which imports bfcl-eval; a unit test keeps the two equal).
TOOL_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
#: The servers ``eval tools`` can start on ``--model`` itself.
SERVERS = ("snapllm", "llama-server")
#: The most cases of a category (BFCL's largest of these has 400).
MAX_CASES = 1000


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluation = commands.add_parser(
        "eval", help="public benchmarks' cases scored on OpenAI-compatible endpoints"
    )
    kinds = evaluation.add_subparsers(dest="eval", required=True)

    tools = kinds.add_parser(
        "tools",
        help="tool calls scored by the Berkeley Function Calling Leaderboard's checker, endpoint by endpoint",
        epilog="Without --endpoint or --serve, starts snapllm and llama-server on --model. "
        "docs/evaluation.md says what each outcome means.",
    )
    tools.add_argument(
        "--endpoint",
        action="append",
        default=[],
        type=named_url,
        metavar="NAME=URL",
        help="score this OpenAI-compatible server (base URL ending in /v1) under NAME (repeatable)",
    )
    tools.add_argument(
        "--serve",
        action="append",
        choices=SERVERS,
        help="start this server on --model and score it (repeatable; llama-server runs with --jinja)",
    )
    tools.add_argument(
        "--model",
        type=model_or_gguf,
        default="qwen2.5-coder-0.5b",
        help="the started servers' model: a packaged model's name or a GGUF file (default %(default)s)",
    )
    tools.add_argument(
        "--request-model",
        help="the requests' `model` (default: the started model's served name, else the endpoint's first)",
    )
    tools.add_argument(
        "--category", choices=TOOL_CATEGORIES, action="append", help="only this category (repeatable)"
    )
    tools.add_argument(
        "--cases",
        type=integer(1, MAX_CASES),
        default=30,
        help="cases per category, spread over it (default 30)",
    )
    tools.add_argument(
        "--max-tokens", type=integer(16, 8192), default=384, help="max_tokens of every request (default 384)"
    )
    tools.add_argument(
        "--threads", type=integer(1, 1024), default=None, help="started servers' threads (default: all cores)"
    )
    tools.add_argument(
        "--n-ctx", type=integer(512, 131_072), default=4096, help="started servers' context window, tokens"
    )
    tools.add_argument(
        "--timeout", type=number(1, 3600), default=600.0, help="seconds one request may take (default 600)"
    )
    tools.add_argument(
        "--examples", type=integer(0, MAX_CASES), default=3, help="failures shown per endpoint and kind"
    )
    tools.add_argument("--json", type=Path, default=None, help="also write every case's outcome to this file")
    tools.set_defaults(implementation="snapllm_dev.eval.tools")
