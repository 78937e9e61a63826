"""The arguments of ``snapllm replay`` (run by :mod:`snapllm_dev.replay.cli`), declared without importing the
local stack: a usage error costs no start-up."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm_dev.argtypes import directory, gguf_file, readable_file


def add_parser(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser(
        "replay", help="replay events/ through their functions against recorded answers"
    )
    replay.add_argument("paths", nargs="*", type=Path, metavar="EVENT_OR_DIR", help="default: every event")
    replay.add_argument("--update", action="store_true", help="re-record the answers, printing what changed")
    replay.add_argument(
        "--events", type=directory, default=Path("events"), help="the folder with replay.toml"
    )
    replay.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    replay.add_argument("--model", type=gguf_file, help="GGUF file to serve (default: qwen2.5-coder-0.5b)")
    replay.set_defaults(implementation="snapllm_dev.replay.cli")
