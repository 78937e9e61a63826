"""``snapllm``'s parser is light: building it, ``--help`` and a usage error import no heavy module, and every
subcommand's implementation is importable from the name its parser gives."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from snapllm.engine.prefault import PREFAULT_MODES
from snapllm_dev.bench import engine, grammar, speculative
from snapllm_dev.bench.arguments import (
    ENGINE_SIDES,
    GRAMMAR_CASES,
    GRAMMAR_MODELS,
    PREFAULT_CHOICES,
    SPECULATIVE_CASES,
    SPECULATIVE_SIDES,
)
from snapllm_dev.cli import build_parser
from snapllm_dev.local.arguments import PACKAGED_MODEL_NAMES
from snapllm_dev.packaged_models import PACKAGED_MODELS

#: Modules whose import costs tenths of a second to seconds (llama.cpp, AWS SDKs, numpy, pydantic, YAML,
#: plotting, HTTP servers and clients, MCP): none may load before a subcommand runs.
HEAVY = (
    "boto3",
    "botocore",
    "llama_cpp",
    "numpy",
    "moto",
    "pydantic",
    "pydantic_settings",
    "yaml",
    "matplotlib",
    "httpx",
    "uvicorn",
    "starlette",
    "mcp",
    "aws_lambda_powertools",
    "samtranslator",
)

PROBE = """
import contextlib, io, json, sys
from snapllm_dev.cli import main
for argv in ARGVS:
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()), \\
            contextlib.redirect_stderr(io.StringIO()):
        main(argv)
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Each runnable subcommand: its words and its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))
            return
    yield path, parser


SUBCOMMANDS = list(_subcommands(build_parser()))


@pytest.mark.parametrize(
    "argvs",
    [
        [["--help"]],
        [[*words, "--help"] for words, _ in SUBCOMMANDS],
        [[*words, "--no-such-flag"] for words, _ in SUBCOMMANDS],
        [["cost", "--requests-per-day", "nan"], ["local", "serve", "--port", "99999"]],
    ],
    ids=["help", "each-subcommand-help", "each-usage-error", "bad-values"],
)
def test_the_parser_imports_no_heavy_module(argvs):
    run = subprocess.run(
        [sys.executable, "-c", PROBE.replace("ARGVS", repr(argvs))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(run.stdout))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_every_subcommand_names_a_module_that_runs_it():
    assert len(SUBCOMMANDS) >= 13
    for words, parser in SUBCOMMANDS:
        implementation = parser.get_default("implementation")
        assert implementation, words
        assert callable(importlib.import_module(implementation).run), words


def test_the_bench_prefault_choices_are_the_engine_modes():
    assert PREFAULT_CHOICES == PREFAULT_MODES


def test_the_bench_choices_are_the_benchmarks_own_tables():
    assert sorted(GRAMMAR_MODELS) == sorted(grammar.MODELS)
    assert sorted(GRAMMAR_CASES) == sorted(grammar.CASES)
    assert tuple(speculative.CASES) == SPECULATIVE_CASES
    assert (
        *speculative.SNAPLLM_SIDES,
        *speculative.SERVER_SIDES,
        speculative.DRAFT_SIDE,
    ) == SPECULATIVE_SIDES
    assert tuple(engine.SIDES) == ENGINE_SIDES  # in the order each round runs them


def test_local_commands_name_the_packaged_models():
    assert sorted(PACKAGED_MODEL_NAMES) == sorted(PACKAGED_MODELS)
