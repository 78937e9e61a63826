"""The arguments of ``snapllm local invoke`` and ``snapllm local serve``, declared without importing what
runs them (:mod:`snapllm_dev.local.cli`, :mod:`snapllm_dev.local.serve_cli`): a usage error costs no
start-up."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from snapllm_dev.argtypes import gguf_file, named_url, number, pair, port, readable_file

MCP_HELP = (
    "durable agent: also take tools from the MCP server at URL (streamable HTTP, no auth), named NAME "
    "(repeatable; more options through --env SNAPLLM_AGENT_MCP_SERVERS=JSON)"
)
#: The packaged models' names (:data:`snapllm_dev.packaged_models.PACKAGED_MODELS`, whose module imports
#: what a usage error should not load; a unit test keeps them equal).
PACKAGED_MODEL_NAMES = ("gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m")
MODEL_HELP = (
    f"GGUF file, or a packaged model ({', '.join(PACKAGED_MODEL_NAMES)}), to serve "
    "(default: qwen2.5-coder-0.5b)"
)
#: The longest invoke timeout: Lambda's limit (15 minutes).
MAX_TIMEOUT_S = 900.0
#: ``snapllm local serve --start-timeout``: seconds, above 0, at most an hour.
start_timeout = number(0, 3600, above_minimum=True)


def served_model(text: str) -> str:
    """A packaged model's name (located, or fetched into the cache, when the command runs:
    :func:`snapllm_dev.packaged_models.model_path`), or the path of a GGUF file."""
    return text if text in PACKAGED_MODEL_NAMES else str(gguf_file(text))


def add_parser(commands: argparse._SubParsersAction) -> None:
    local = commands.add_parser("local", help="run functions locally (no Docker, no AWS)")
    verbs = local.add_subparsers(dest="verb", required=True)
    invoke = verbs.add_parser("invoke", help="init, snapshot, restore and invoke a function once")
    invoke.add_argument("function", help="logical ID in the template, e.g. InferenceFunction")
    invoke.add_argument("-e", "--event", type=Path, help="JSON event file ('-' for stdin); default {}")
    invoke.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    invoke.add_argument("--model", type=served_model, help=MODEL_HELP)
    invoke.add_argument(
        "--timeout",
        type=number(0, MAX_TIMEOUT_S, above_minimum=True),
        help="invoke timeout in seconds (default: the template's)",
    )
    invoke.add_argument(
        "--env", action="append", default=[], type=pair, metavar="NAME=VALUE", help="extra variable"
    )
    invoke.add_argument(
        "--s3-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault into the model download at init (repeatable): reset@30MB, reset@1MB:always, "
        "close@10MB, stall@10MB, slow@1MB/s, status=503:SlowDown:every=3 (see snapllm_dev.local.faults)",
    )
    # Durable functions (DurableConfig in the template) run through the durable runner.
    decision = invoke.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true", help="durable agent: approve when asked")
    decision.add_argument("--reject", action="store_true", help="durable agent: reject when asked")
    invoke.add_argument("--reason", help="durable agent: the approver's comment")
    invoke.add_argument(
        "--mcp", action="append", default=[], type=mcp_server, metavar="NAME=URL", help=MCP_HELP
    )
    invoke.set_defaults(implementation="snapllm_dev.local.cli")

    serve = verbs.add_parser(
        "serve",
        help="serve the OpenAI-compatible routes on 127.0.0.1 (no Docker)",
        epilog="Keys (ApiAuth=KEY): $SNAPLLM_API_KEY (one key), --api-keys-file, or --api-key; any of them "
        "set and no key found stops the start (exit 2).",
    )
    # $PORT is read when the command runs (snapllm_dev.local.serve_cli), so a bad value fails `serve` alone.
    serve.add_argument("--port", type=port, help="port (default: $PORT or 3000)")
    serve.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    serve.add_argument("--model", type=served_model, help=MODEL_HELP)
    serve.add_argument(
        "--no-stream", action="store_true", help="do not start the streaming (web adapter) function"
    )
    serve.add_argument(
        "--route",
        action="append",
        default=[],
        type=named_url,
        metavar="NAME=URL",
        help="also route model NAME to an always-on OpenAI-compatible server (base URL ending in /v1)",
    )
    serve.add_argument(
        "--fallback",
        action="append",
        default=[],
        type=fallback,
        metavar="NAME=OTHER[,OTHER]",
        help="on a 429/503 from NAME's target, send the request on to OTHER (a route name)",
    )
    serve.add_argument(
        "--mcp", action="append", default=[], type=mcp_server, metavar="NAME=URL", help=MCP_HELP
    )
    serve.add_argument(
        "--embedding-model",
        type=embedding_model,
        metavar="NAME=FILE",
        help="also serve the GGUF FILE as embedding model NAME (/v1/embeddings; /v1/rerank with rank "
        "pooling), in its own environment",
    )
    serve.add_argument(
        "--embedding-pooling",
        choices=["model", "mean", "cls", "last", "rank"],
        default="model",
        help="how the embedding model pools its tokens (default: the GGUF's own pooling type); rank serves "
        "a reranker",
    )
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        type=api_key,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' as ApiAuth=KEY does (repeatable; any text without spaces). "
        "A command line is visible to every local user (ps): prefer $SNAPLLM_API_KEY or --api-keys-file",
    )
    serve.add_argument(
        "--api-keys-file",
        type=readable_file,
        metavar="FILE",
        help="like --api-key, for each line of FILE (blank lines and lines starting with # skipped); a FILE "
        "with no key stops the start",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        type=origin,
        metavar="ORIGIN",
        help="let browser apps at ORIGIN call the API, as the template's CorsAllowedOrigins does "
        "(repeatable; e.g. http://localhost:5173)",
    )
    serve.add_argument(
        "--start-timeout",
        type=start_timeout,
        metavar="SECONDS",
        help="longest each phase of the streaming function's start may take (its init, warm-up, restore; "
        "default: $SNAPLLM_LOCAL_START_TIMEOUT_S, else 120 s + 30 s per 100 MB of model)",
    )
    serve.set_defaults(implementation="snapllm_dev.local.serve_cli")


def embedding_model(text: str) -> tuple[str, Path]:
    """``NAME=FILE``: the name an embedding model is served under and its GGUF file."""
    name, value = pair(text)
    return name, gguf_file(value)


def api_key(text: str) -> str:
    """A key ``snapllm local serve`` takes: what a bearer token may be (RFC 6750), at most 256 characters."""
    if not re.fullmatch(r"[A-Za-z0-9\-._~+/]{1,256}=*", text):
        raise argparse.ArgumentTypeError(
            "takes letters, digits and -._~+/ (a bearer token), at most 256 characters"
        )
    return text


def origin(text: str) -> str:
    """A browser origin, ``scheme://host[:port]`` with no path (or ``*``), as ``CorsAllowedOrigins`` lists
    them."""
    if text != "*" and not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?", text):
        raise argparse.ArgumentTypeError(
            f"takes an origin such as https://app.example.com (no path), got {text!r}"
        )
    return text


def fallback(text: str) -> tuple[str, list[str]]:
    """``NAME=OTHER[,OTHER]``: a route name and the names it falls back to, none empty."""
    name, value = pair(text)
    others = [other.strip() for other in value.split(",")]
    if not all(others):
        raise argparse.ArgumentTypeError(f"takes NAME=OTHER[,OTHER] with no empty name, got {text!r}")
    return name, others


def mcp_server(text: str) -> str:
    """``NAME=URL`` of an MCP server, checked here and kept as text for
    :func:`snapllm_dev.local.durable.with_mcp_servers`."""
    named_url(text)
    return text
