"""``snapllm model push FILE --stack NAME``: a model on disk into a deployed stack's bucket, then a stack
update that publishes new SnapStart versions loading it.

    pushed = push_model(Path("model.gguf"), stack, s3, progress=print_progress)   # DeployedStack.read(...)
    update_model_digest(cloudformation, stack, pushed.sha256)

docs/redeploys.md ("A new model") says how the upload is verified and which parameters the update changes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from snapllm.deploy.upload import ModelUpload, Progress, UploadSettings
from snapllm.errors import StackError

#: What ``sam deploy`` acknowledges for this template: IAM roles, and the SAM transform.
CAPABILITIES = ("CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND")
BUCKET_OUTPUT = "ModelBucket"
KEY_PARAMETER = "ModelKey"
DIGEST_PARAMETER = "ModelSha256"
SOURCE_PARAMETER = "ModelSource"
_HASH_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class DeployedStack:
    """What a push needs to know of a stack deployed from this project's template."""

    name: str
    bucket: str
    key: str
    sha256: str
    parameters: tuple[str, ...]

    @classmethod
    def read(cls, cloudformation: Any, name: str) -> DeployedStack:
        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except ClientError as exc:
            raise StackError(f"cannot read the stack {name!r}: {_message(exc)}") from None
        except BotoCoreError as exc:
            raise StackError(f"cannot read the stack {name!r}: {exc}") from None
        stack = stacks[0]
        outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs") or []}
        parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or []}
        if not outputs.get(BUCKET_OUTPUT) or KEY_PARAMETER not in parameters:
            raise StackError(
                f"the stack {name!r} has no {BUCKET_OUTPUT} output or no {KEY_PARAMETER} parameter: "
                "is it deployed from this project's template.yaml?"
            )
        return cls(
            name=name,
            bucket=outputs[BUCKET_OUTPUT],
            key=parameters[KEY_PARAMETER],
            sha256=parameters.get(DIGEST_PARAMETER, ""),
            parameters=tuple(parameters),
        )


@dataclass(frozen=True)
class PushResult:
    sha256: str
    size: int
    key: str
    uploaded: bool  # False: the object with this digest was already there
    seconds: float


def file_sha256(path: Path, progress: Progress | None = None) -> str:
    """The SHA-256 of ``path``, read in chunks (a model is several GB)."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    done = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, size)
    return digest.hexdigest()


def push_model(
    path: Path,
    stack: DeployedStack,
    s3: Any,
    *,
    key: str | None = None,
    settings: UploadSettings | None = None,
    hashing: Progress | None = None,
    progress: Progress | None = None,
) -> PushResult:
    """Upload ``path`` to the stack's bucket under ``key`` (default: the stack's ``ModelKey``).

    Raises:
        OSError: The file cannot be read.
        ModelCopyError: S3 refused the upload, or the bytes sent changed while reading (the upload is
            aborted; the object that was there stays).
    """
    started = time.monotonic()
    sha256 = file_sha256(path, hashing)
    key = key or stack.key
    upload = ModelUpload(
        s3, bucket=stack.bucket, key=key, sha256=sha256, settings=settings, progress=progress
    )
    existing = upload.existing()
    size = path.stat().st_size
    if existing is not None and existing.sha256 == sha256 and existing.size == size:
        return PushResult(sha256, size, key, uploaded=False, seconds=time.monotonic() - started)
    with path.open("rb") as handle:
        upload.write(handle.readinto, size=size, source=str(path))
    return PushResult(sha256, size, key, uploaded=True, seconds=time.monotonic() - started)


def update_model_digest(
    cloudformation: Any,
    stack: DeployedStack,
    sha256: str,
    *,
    key: str | None = None,
    wait: bool = True,
    on_wait: Callable[[], None] | None = None,
    poll_s: int = 10,
    timeout_s: int = 3600,
) -> str:
    """Update the stack to ``sha256`` (and ``key``); returns its final status, or ``"UNCHANGED"`` when the
    stack already names them.

    Raises:
        StackError: CloudFormation refused the update, or it failed and rolled back (with the reason).
    """
    changes = {DIGEST_PARAMETER: sha256, KEY_PARAMETER: key or stack.key, SOURCE_PARAMETER: ""}
    parameters = [
        {"ParameterKey": name, "ParameterValue": changes[name]}
        if name in changes
        else {"ParameterKey": name, "UsePreviousValue": True}
        for name in stack.parameters
    ]
    try:
        cloudformation.update_stack(
            StackName=stack.name,
            UsePreviousTemplate=True,
            Parameters=parameters,
            Capabilities=list(CAPABILITIES),
        )
    except ClientError as exc:
        if "No updates are to be performed" in _message(exc):
            return "UNCHANGED"
        raise StackError(f"CloudFormation refused to update {stack.name!r}: {_message(exc)}") from None
    if not wait:
        return "UPDATE_IN_PROGRESS"
    if on_wait is not None:
        on_wait()
    try:
        cloudformation.get_waiter("stack_update_complete").wait(
            StackName=stack.name,
            WaiterConfig={"Delay": poll_s, "MaxAttempts": max(1, timeout_s // max(poll_s, 1))},
        )
    except WaiterError:
        status, reason = _status(cloudformation, stack.name)
        raise StackError(f"the update of {stack.name!r} ended in {status}: {reason}") from None
    return _status(cloudformation, stack.name)[0]


def _status(cloudformation: Any, name: str) -> tuple[str, str]:
    stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
    return stack.get("StackStatus", "UNKNOWN"), stack.get("StackStatusReason", "no reason given")


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message") or exc)
