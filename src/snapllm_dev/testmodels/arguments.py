"""The arguments of ``snapllm test-models`` (run by :mod:`snapllm_dev.testmodels.cli`), declared without
importing numpy or gguf: a usage error costs no start-up."""

from __future__ import annotations

import argparse

#: The families, as :data:`snapllm_dev.testmodels.families.TEST_MODEL_FAMILIES` names them (kept here so the
#: parser imports nothing heavy; a test checks the two agree).
FAMILY_NAMES = ("qwen3", "qwen2.5", "llama3.1", "llama3.2", "gemma3", "deepseek-r1-distill", "gpt-oss")
#: The rerankers, as :data:`snapllm_dev.testmodels.families.RERANKERS` names them.
RERANKER_NAMES = ("qwen3-reranker",)
#: The shapes, as :data:`snapllm_dev.testmodels.build.SHAPES` names them.
SHAPE_NAMES = ("tiny", "135m", "1b", "3b")


def add_parser(commands: argparse._SubParsersAction) -> None:
    build = commands.add_parser(
        "test-models",
        help="write small GGUF models of each family (random weights, real tokenizer and chat template)",
    )
    build.add_argument(
        "--family",
        action="append",
        choices=FAMILY_NAMES + RERANKER_NAMES,
        help="a family or reranker to build (repeat for more; default: all)",
    )
    build.add_argument(
        "--shape",
        choices=SHAPE_NAMES,
        default="tiny",
        help="the models' size: tiny (2 layers, F16; what the tests use) or a real model's (Q4_0, for "
        "benchmarks: 135m as SmolLM2-135M, 1b and 3b as Llama 3.2)",
    )
    build.set_defaults(implementation="snapllm_dev.testmodels.cli")
