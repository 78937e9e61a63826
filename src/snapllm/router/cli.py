"""``snapllm local serve``: the OpenAI-compatible API on 127.0.0.1 (see :mod:`snapllm.router.serve`).

snapllm local serve --port 3000
# then: OpenAI(base_url="http://127.0.0.1:3000/v1", api_key="local")
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from snapllm.errors import SnapllmError


def add_serve_parser(verbs: argparse._SubParsersAction) -> None:
    serve = verbs.add_parser("serve", help="serve the OpenAI-compatible routes on 127.0.0.1 (no Docker)")
    serve.add_argument(
        "--port", type=int, default=int(os.environ.get("PORT") or 3000), help="port (default: $PORT or 3000)"
    )
    serve.add_argument("-t", "--template", type=Path, default=Path("template.yaml"))
    serve.add_argument("--model", type=Path, help="GGUF file to serve (default: the packaged SmolLM2)")
    serve.add_argument(
        "--no-stream", action="store_true", help="do not start StreamFunction (no stream=true)"
    )
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from snapllm.router.serve import LocalStack, serve

    try:
        stack = LocalStack.start(args.template, model_path=args.model, streaming=not args.no_stream)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm local serve: {exc}", file=sys.stderr)
        return 1
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; turning them into exceptions lets the
    # stack stop its child processes (local S3, the functions) on the way out.
    signal.signal(signal.SIGTERM, _exit)
    with stack, contextlib.suppress(KeyboardInterrupt, SystemExit):
        serve(stack, port=args.port)
    return 0


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
