"""The arguments of ``snapllm model push`` (run by :mod:`snapllm_dev.model_push.cli`), declared without
importing
boto3: a usage error costs no start-up."""

from __future__ import annotations

import argparse

from snapllm_dev.argtypes import gguf_file, integer

#: S3's multipart part sizes, in MiB.
MIN_PART_MIB, MAX_PART_MIB = 5, 5120


def add_parser(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="put a model into a deployed stack")
    verbs = model.add_subparsers(dest="verb", required=True)
    push = verbs.add_parser("push", help="upload a GGUF file and update the stack to publish new versions")
    push.add_argument("file", type=gguf_file, help="the GGUF file")
    push.add_argument("--stack", required=True, help="the stack deployed from this template")
    push.add_argument("--key", help="S3 key (default: the stack's ModelKey)")
    push.add_argument(
        "--part-size-mib",
        type=integer(MIN_PART_MIB, MAX_PART_MIB),
        default=64,
        help=f"multipart part size ({MIN_PART_MIB}-{MAX_PART_MIB})",
    )
    push.add_argument("--no-update", action="store_true", help="upload only; do not update the stack")
    push.add_argument("--region", help="AWS region (default: boto3's)")
    push.set_defaults(implementation="snapllm_dev.model_push.cli")
