"""``snapllm local serve``: the OpenAI-compatible API on 127.0.0.1 (see :mod:`snapllm_dev.local.gateway`), and
``snapllm local invoke`` of an HTTP API function: one API Gateway event through the same local stack.

snapllm local serve --port 3000
# then: OpenAI(base_url="http://127.0.0.1:3000/v1", api_key="local")
SNAPLLM_API_KEY=sk-local-1 snapllm local serve    # ApiAuth=KEY: only api_key="sk-local-1" gets in
snapllm local serve --cors-origin http://localhost:5173    # CORS as CorsAllowedOrigins plays it
snapllm local invoke RouterFunction -e events/router/chat.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from snapllm.api_keys import local_store
from snapllm.errors import ConfigurationError, RequestError, SnapllmError
from snapllm.protocol.http.edge import decode_json
from snapllm_dev import sam
from snapllm_dev.argtypes import port_number
from snapllm_dev.local.arguments import api_key, start_timeout
from snapllm_dev.local.cors import CORS_PARAMETER
from snapllm_dev.local.durable import with_mcp_servers
from snapllm_dev.local.gateway import LocalGateway, listen, serve
from snapllm_dev.local.lifecycle import LocalFunctionError
from snapllm_dev.local.lwa import START_TIMEOUT_VARIABLE
from snapllm_dev.local.stack import EmbeddingModel, LocalStack
from snapllm_dev.packaged_models import model_path
from snapllm_dev.sam import Function, Template

#: The port ``snapllm local serve`` listens on when neither ``--port`` nor ``$PORT`` says.
DEFAULT_PORT = 3000
#: A key to serve with, kept off the command line (which every local user sees in ``ps``).
API_KEY_VARIABLE = "SNAPLLM_API_KEY"


def listening_port(given: int | None, environ: Mapping[str, str] = os.environ) -> int:
    """``--port``, else ``$PORT`` (blank: unset), else 3000; a bad ``$PORT`` raises a ConfigurationError."""
    if given is not None:
        return given
    text = environ.get("PORT", "").strip()
    if not text:
        return DEFAULT_PORT
    try:
        return port_number(text)
    except ValueError as exc:
        raise ConfigurationError(f"PORT {exc}") from None


def served_keys(
    given: list[str], keys_file: Path | None, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """The keys of ``--api-key``, ``$SNAPLLM_API_KEY`` and ``--api-keys-file``. A ConfigurationError names a
    bad line, a blank variable or a file with no key: keys asked for and none found never means "no check"."""
    keys = list(given)
    if API_KEY_VARIABLE in environ:
        value = environ[API_KEY_VARIABLE].strip()
        if not value:
            raise ConfigurationError(f"{API_KEY_VARIABLE} is set but blank: set a key, or unset it")
        try:
            keys.append(api_key(value))
        except argparse.ArgumentTypeError as exc:
            raise ConfigurationError(f"{API_KEY_VARIABLE} {exc}") from None
    if keys_file is not None:
        found = []
        for number, line in enumerate(keys_file.read_text(encoding="utf-8").splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                found.append(api_key(line))
            except argparse.ArgumentTypeError as exc:
                raise ConfigurationError(f"--api-keys-file {keys_file} line {number}: {exc}") from None
        if not found:
            raise ConfigurationError(
                f"--api-keys-file {keys_file} holds no key (only blank lines or comments)"
            )
        keys.extend(found)
    return keys


def run(args: argparse.Namespace) -> int:
    """``snapllm local serve``: exit 2, before anything starts, on an unusable port, template or route."""
    sock = None
    resources = contextlib.ExitStack()
    try:
        args.model = model_path(args.model) if args.model else None
        keys = served_keys(args.api_key, args.api_keys_file)
        # The functions' processes get the keys' hashes, never the key in their environment.
        os.environ.pop(API_KEY_VARIABLE, None)
        keys_file = None
        if keys:
            # The keys' records (salted hashes), for the router's authorizer and the streaming app's process.
            folder = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="snapllm-keys-")))
            keys_file = folder / "api-keys.jsonl"
            local_store(keys).write(keys_file)
        port = listening_port(args.port)
        try:
            sock = listen(port)
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
        origins = {CORS_PARAMETER: ",".join(args.cors_origin)} if args.cors_origin else {}
        template = sam.load(args.template, overrides=origins)
        stack = LocalStack.start(
            template,
            model_path=args.model,
            streaming=not args.no_stream,
            endpoints=dict(args.route),
            fallbacks=dict(args.fallback),
            agent_overrides=with_mcp_servers({}, args.mcp),
            embedding=_embedding(args),
            api_keys_file=keys_file,
            start_timeout_s=start_timeout_s(args.start_timeout),
        )
    except (SnapllmError, OSError, ValueError) as exc:
        if sock is not None:
            sock.close()
        resources.close()
        print(f"snapllm local serve: {exc}", file=sys.stderr)
        # A function that failed for another reason than its configuration (a download, say) is not a usage
        # error.
        return 1 if isinstance(exc, LocalFunctionError) and not exc.is_configuration_error else 2
    with resources, sock, stack, contextlib.suppress(KeyboardInterrupt, SystemExit):
        serve(stack, sock)
    return 0


def start_timeout_s(given: float | None, environ: Mapping[str, str] = os.environ) -> float | None:
    """``--start-timeout``, else ``$SNAPLLM_LOCAL_START_TIMEOUT_S`` (blank: unset), else None (the limit then
    follows the model's size); a bad value raises a ConfigurationError."""
    if given is not None:
        return given
    text = environ.get(START_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return start_timeout(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigurationError(f"{START_TIMEOUT_VARIABLE} {exc}") from None


def _embedding(args: argparse.Namespace) -> EmbeddingModel | None:
    if args.embedding_model is None:
        return None
    name, path = args.embedding_model
    return EmbeddingModel(path, name, args.embedding_pooling)


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
    os.environ.update(dict(args.env))
    try:
        # The router logs to stdout, as on Lambda: keep stdout for the response.
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
