"""``snapllm model push FILE --stack NAME``: see :mod:`snapllm_dev.model_push.push`.

snapllm model push ./Qwen2.5-0.5B-Instruct-Q4_K_M.gguf --stack snapllm
snapllm model push ./model.gguf --stack snapllm --key models/other.gguf --no-update

Prints the digest, the upload's progress and the stack update's result; exits 1 when the upload or the update
fails, 2 on unusable arguments. The AWS credentials and region are boto3's (environment, profile).
"""

from __future__ import annotations

import argparse
import sys

from botocore.exceptions import BotoCoreError

from snapllm.aws_auth import session_with_credentials
from snapllm.deploy.upload import MiB, ThrottledProgress, UploadSettings
from snapllm.errors import ConfigurationError, SnapllmError
from snapllm_dev.model_push.push import DeployedStack, push_model, update_model_digest


def _progress(what: str) -> ThrottledProgress:
    """One line on stderr, rewritten in place twice a second: how far, how fast."""

    def report(done: int, size: int | None, mib_per_s: float) -> None:
        total = f" of {size / MiB:,.0f}" if size else ""
        end = "\n" if done == size else ""
        print(f"\r{what}: {done / MiB:,.0f}{total} MiB, {mib_per_s:,.0f} MiB/s", end=end, file=sys.stderr)

    return ThrottledProgress(report, every_s=0.5)


def run(args: argparse.Namespace) -> int:
    """``snapllm model push``: exit 2 on unusable arguments or AWS configuration, 1 when AWS fails."""
    try:
        settings = UploadSettings(part_size=args.part_size_mib * MiB)
        # First: without credentials or a region, stop before reading the file or calling AWS.
        session = session_with_credentials(args.region)
        cloudformation = session.client("cloudformation")
        s3 = session.client("s3")
    except (ConfigurationError, BotoCoreError, ValueError) as exc:
        print(f"snapllm model push: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        stack = DeployedStack.read(cloudformation, args.stack)
        pushed = push_model(
            args.file,
            stack,
            s3,
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
