"""``snapllm model push FILE --stack NAME``: see :mod:`snapllm.deploy.push`.

snapllm model push ./Qwen2.5-0.5B-Instruct-Q4_K_M.gguf --stack snapllm
snapllm model push ./model.gguf --stack snapllm --key models/other.gguf --no-update

Prints the digest, the upload's progress and the stack update's result; exits 1 when the upload or the update
fails, 2 on unusable arguments. The AWS credentials and region are boto3's (environment, profile).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import boto3

from snapllm.deploy.push import DeployedStack, push_model, update_model_digest
from snapllm.deploy.upload import MiB, ThrottledProgress, UploadSettings
from snapllm.errors import SnapllmError


def add_parser(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="put a model into a deployed stack")
    verbs = model.add_subparsers(dest="verb", required=True)
    push = verbs.add_parser("push", help="upload a GGUF file and update the stack to publish new versions")
    push.add_argument("file", type=Path, help="the GGUF file")
    push.add_argument("--stack", required=True, help="the stack deployed from this template")
    push.add_argument("--key", help="S3 key (default: the stack's ModelKey)")
    push.add_argument("--part-size-mib", type=int, default=64, help="multipart part size (5-5120)")
    push.add_argument("--no-update", action="store_true", help="upload only; do not update the stack")
    push.add_argument("--region", help="AWS region (default: boto3's)")
    push.set_defaults(func=_push)


def _progress(what: str) -> ThrottledProgress:
    """One line on stderr, rewritten in place twice a second: how far, how fast."""

    def report(done: int, size: int | None, mib_per_s: float) -> None:
        total = f" of {size / MiB:,.0f}" if size else ""
        end = "\n" if done == size else ""
        print(f"\r{what}: {done / MiB:,.0f}{total} MiB, {mib_per_s:,.0f} MiB/s", end=end, file=sys.stderr)

    return ThrottledProgress(report, every_s=0.5)


def _push(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        print(f"snapllm model push: {args.file} is not a file", file=sys.stderr)
        return 2
    try:
        settings = UploadSettings(part_size=args.part_size_mib * MiB)
    except ValueError as exc:
        print(f"snapllm model push: --part-size-mib: {exc}", file=sys.stderr)
        return 2
    session = boto3.session.Session(region_name=args.region)
    cloudformation = session.client("cloudformation")
    try:
        stack = DeployedStack.read(cloudformation, args.stack)
        pushed = push_model(
            args.file,
            stack,
            session.client("s3"),
            key=args.key,
            settings=settings,
            hashing=_progress("SHA-256"),
            progress=_progress("upload"),
        )
        where = f"s3://{stack.bucket}/{pushed.key}"
        if pushed.uploaded:
            print(
                f"uploaded {where} ({pushed.size:,} bytes, sha256 {pushed.sha256}) in {pushed.seconds:.1f} s"
            )
        else:
            print(f"{where} already holds sha256 {pushed.sha256}: nothing uploaded")
        if args.no_update:
            print(
                f"stack not updated: deploy with ModelSha256={pushed.sha256} to publish versions loading it"
            )
            return 0
        status = update_model_digest(
            cloudformation,
            stack,
            pushed.sha256,
            key=pushed.key,
            on_wait=lambda: print(f"updating {stack.name} (new versions are published)...", file=sys.stderr),
        )
    except (SnapllmError, OSError) as exc:
        print(f"snapllm model push: {exc}", file=sys.stderr)
        return 1
    print(f"stack {stack.name}: {status}")
    return 0
