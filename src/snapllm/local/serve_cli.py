"""``snapllm local serve``: the OpenAI-compatible API on 127.0.0.1 (see :mod:`snapllm.local.gateway`), and
``snapllm local invoke`` of an HTTP API function: one API Gateway event through the same local stack.

snapllm local serve --port 3000
# then: OpenAI(base_url="http://127.0.0.1:3000/v1", api_key="local")
snapllm local invoke RouterFunction -e events/router/chat.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from snapllm import sam
from snapllm.edge import decode_json
from snapllm.errors import RequestError, SnapllmError
from snapllm.local.durable import with_mcp_servers
from snapllm.local.durable_cli import MCP_HELP
from snapllm.local.gateway import LocalGateway, serve
from snapllm.local.processes import exit_on_sigterm
from snapllm.local.stack import LocalStack
from snapllm.sam import Function, Template


def add_serve_parser(verbs: argparse._SubParsersAction) -> None:
    serve = verbs.add_parser("serve", help="serve the OpenAI-compatible routes on 127.0.0.1 (no Docker)")
    serve.add_argument(
        "--port", type=int, default=int(os.environ.get("PORT") or 3000), help="port (default: $PORT or 3000)"
    )
    serve.add_argument("-t", "--template", type=Path, default=Path("template.yaml"))
    serve.add_argument("--model", type=Path, help="GGUF file to serve (default: the packaged SmolLM2)")
    serve.add_argument(
        "--no-stream", action="store_true", help="do not start the streaming (web adapter) function"
    )
    serve.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="also route model NAME to an always-on OpenAI-compatible server (base URL ending in /v1)",
    )
    serve.add_argument(
        "--fallback",
        action="append",
        default=[],
        metavar="NAME=OTHER[,OTHER]",
        help="on a 429/503 from NAME's target, send the request on to OTHER (a route name)",
    )
    serve.add_argument("--mcp", action="append", default=[], metavar="NAME=URL", help=MCP_HELP)
    serve.set_defaults(func=_serve)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in items]
    if any(len(pair) != 2 or not pair[0] or not pair[1] for pair in pairs):
        raise ValueError(f"{flag} takes NAME=VALUE")
    return dict(pairs)


def _serve(args: argparse.Namespace) -> int:
    try:
        template = sam.load(args.template)
        endpoints = _pairs(args.route, "--route")
        fallbacks = {name: value.split(",") for name, value in _pairs(args.fallback, "--fallback").items()}
        stack = LocalStack.start(
            template,
            model_path=args.model,
            streaming=not args.no_stream,
            endpoints=endpoints,
            fallbacks=fallbacks,
            agent_overrides=with_mcp_servers({}, args.mcp),
        )
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm local serve: {exc}", file=sys.stderr)
        return 1
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; turning them into exceptions lets the
    # stack stop its child processes (local S3, the functions) on the way out.
    exit_on_sigterm()
    with stack, contextlib.suppress(KeyboardInterrupt, SystemExit):
        serve(stack, port=args.port)
    return 0


def invoke_http_api(args: argparse.Namespace, template: Template, function: Function, event_text: str) -> int:
    """Entry point from ``snapllm local invoke`` for a function behind an HTTP API: the handler's API
    Gateway response on stdout.

    The router's routing table names deployed aliases, so it runs on the local stack (as in ``serve``),
    routed to a restored local inference environment; its logs and metrics go to stderr.
    """
    try:
        event = decode_json(event_text)
    except RequestError as exc:
        print(f"snapllm local invoke: the event is not an API Gateway event: {exc}", file=sys.stderr)
        return 2
    if not isinstance(event, dict):
        print(f"snapllm local invoke: {function.name} takes an API Gateway HTTP API event", file=sys.stderr)
        return 2
    os.environ.update(dict(item.split("=", 1) for item in args.env))
    try:
        # The router's Logger binds its stream when the stack builds it: keep stdout for the response.
        with (
            contextlib.redirect_stdout(sys.stderr),
            LocalStack.start(template, function, model_path=args.model, streaming=False) as stack,
        ):
            result = LocalGateway(stack, streaming=False).invoke_router(event)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm local invoke: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0
