"""The ``ModelObject`` custom resource: the ``ModelSource`` URL copied into the model bucket during deploy
(``functions/model_source/app.py`` calls :meth:`ModelObjectResource.handle`).

Properties: ``Bucket``, ``Key``, ``Url``, ``Sha256`` and ``PartSizeMiB`` (5-5120, default 64). Data:
``Sha256``, ``Size``, ``VersionId``, ``Copied``; the physical ID is ``s3://bucket/key``. What Create, Update
and Delete do, and how the answer reaches CloudFormation in time: docs/deploy.md.
"""

from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from snapllm.deploy.cfn_response import (
    FAILED,
    RESPONSE_RESERVE_S,
    SUCCESS,
    ResponseSender,
    deadline_from,
    send_response,
)
from snapllm.deploy.source import CREDENTIALS_REFUSED, HTTPSource, SourceSettings, has_credentials, redact
from snapllm.deploy.upload import MiB, ModelUpload, ThrottledProgress, UploadSettings
from snapllm.errors import (
    CustomResourceResponseError,
    ModelCopyInputError,
    ModelCopyTimeoutError,
    SnapllmError,
)

logger = logging.getLogger("snapllm.deploy")

#: CloudFormation shows the reason in the console; its whole response body must stay under 4 KB.
MAX_REASON_CHARS = 1000
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
#: The least margin a copy may leave before the deadline: the reserve and one short attempt to answer.
MIN_MARGIN_S = RESPONSE_RESERVE_S + 1.0
# What each property is called where a user sets it (the template's parameters).
_PARAMETERS = {"Url": "ModelSource", "Sha256": "ModelSha256", "Bucket": "ModelBucketName", "Key": "ModelKey"}


class CustomResourceRequest(BaseModel):
    """The fields of a CloudFormation custom resource request that this resource reads."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    request_type: Literal["Create", "Update", "Delete"] = Field(alias="RequestType")
    response_url: str = Field(alias="ResponseURL", min_length=1)
    stack_id: str = Field(alias="StackId")
    request_id: str = Field(alias="RequestId")
    logical_resource_id: str = Field(alias="LogicalResourceId")
    physical_resource_id: str | None = Field(None, alias="PhysicalResourceId")
    resource_properties: dict[str, Any] = Field(default_factory=dict, alias="ResourceProperties")


class ModelObjectProperties(BaseModel):
    """``ResourceProperties`` of a ``ModelObject``, validated (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    bucket: str = Field(alias="Bucket", min_length=3)
    key: str = Field(alias="Key", min_length=1)
    url: str = Field(alias="Url")
    sha256: str = Field(alias="Sha256")
    part_size_mib: int = Field(64, alias="PartSizeMiB", ge=5, le=5120)

    @field_validator("url")
    @classmethod
    def _https(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError("must be an https:// URL with a host name")
        if has_credentials(value):
            raise ValueError(CREDENTIALS_REFUSED)
        return value.strip()

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        if not _SHA256.fullmatch(value.strip()):
            raise ValueError("must be the file's SHA-256: 64 hex digits")
        return value.strip().lower()

    @classmethod
    def parse(cls, properties: Mapping[str, Any]) -> ModelObjectProperties:
        """The properties, or one :class:`ModelCopyInputError` naming every bad one and its parameter."""
        try:
            return cls.model_validate(properties)
        except ValidationError as exc:
            problems = []
            for error in exc.errors(include_url=False):
                name = str(error["loc"][0]) if error["loc"] else "ResourceProperties"
                where = f"{name} (parameter {_PARAMETERS[name]})" if name in _PARAMETERS else name
                message = error["msg"].removeprefix("Value error, ")
                given = error["input"]
                if name == "Url" and isinstance(given, str):
                    given = redact(given)  # never echo a password or a signed query back
                given = f", got {given!r}" if error["type"] != "missing" else ""
                problems.append(f"{where}: {message}{given}")
            raise ModelCopyInputError("invalid ModelObject properties: " + "; ".join(problems)) from None

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class ModelObjectResource:
    """Answers CloudFormation's requests for ``ModelObject`` resources; see the module docstring."""

    def __init__(
        self,
        s3_client: Any,
        *,
        source_settings: SourceSettings | None = None,
        concurrency: int = 2,
        ssl_context: ssl.SSLContext | None = None,
        margin_s: float = 30.0,
        send: ResponseSender = send_response,
    ) -> None:
        self.s3 = s3_client
        self.source_settings = source_settings or SourceSettings()
        self.concurrency = concurrency
        self.ssl_context = ssl_context
        if margin_s < MIN_MARGIN_S:
            raise ValueError(f"margin_s must leave time to answer: at least {MIN_MARGIN_S} s, got {margin_s}")
        self.margin_s = margin_s
        self.send = send

    @classmethod
    def from_env(cls) -> ModelObjectResource:
        """The resource with a boto3 S3 client of the function's region and role."""
        config = Config(connect_timeout=10, read_timeout=120, retries={"mode": "standard", "max_attempts": 5})
        return cls(boto3.client("s3", config=config))

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Do what ``event`` asks, send CloudFormation the outcome and return the response sent.

        Raises:
            ModelCopyInputError: ``event`` is not a custom resource request (there is no one to answer).
            CustomResourceResponseError: The response could not be delivered.
        """
        try:
            request = CustomResourceRequest.model_validate(event)
        except ValidationError as exc:
            raise ModelCopyInputError(f"not a CloudFormation custom resource request: {exc}") from None
        deadline = deadline_from(context, self.margin_s)
        # The answer may use the margin the copy left, all but the reserve.
        answer_by = deadline_from(context, RESPONSE_RESERVE_S)
        body = self._answer(request, deadline)
        logger.info(
            "response",
            extra={
                "request_type": request.request_type,
                "logical_resource_id": request.logical_resource_id,
                "status": body["Status"],
                "reason": body["Reason"],
                "data": body["Data"],
            },
        )
        try:
            self.send(request.response_url, body, deadline=answer_by)
        except CustomResourceResponseError as exc:
            logger.error("no response delivered", extra={"reason": str(exc)})
            raise
        return body

    def _answer(self, request: CustomResourceRequest, deadline: float | None) -> dict[str, Any]:
        physical_id = request.physical_resource_id or f"{request.logical_resource_id}-not-created"
        try:
            if request.request_type == "Delete":
                # The object stays: it is the model a retained version (or the rolled-back stack) runs on.
                return _response(request, SUCCESS, physical_id)
            properties = ModelObjectProperties.parse(request.resource_properties)
            physical_id = properties.location
            data = self.put_in_place(properties, deadline=deadline)
            return _response(request, SUCCESS, physical_id, data=data)
        except SnapllmError as exc:
            return _response(request, FAILED, physical_id, reason=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            logger.exception("model copy failed unexpectedly")
            reason = f"unexpected {type(exc).__name__}: {exc} (see the function's logs)"
            return _response(request, FAILED, physical_id, reason=reason)

    def put_in_place(self, properties: ModelObjectProperties, *, deadline: float | None) -> dict[str, str]:
        """Copy ``properties.url`` to the bucket unless the object with that digest is already there."""
        upload = ModelUpload(
            self.s3,
            bucket=properties.bucket,
            key=properties.key,
            sha256=properties.sha256,
            settings=UploadSettings(part_size=properties.part_size_mib * MiB, concurrency=self.concurrency),
            progress=_log_progress(properties.location),
        )
        existing = upload.existing()
        if existing is not None and existing.sha256 == properties.sha256:
            logger.info("model already in place", extra={"location": upload.location, "size": existing.size})
            return _data(properties.sha256, existing.size, existing.version_id, copied=False)
        started = time.monotonic()
        source = HTTPSource(
            properties.url, settings=self.source_settings, ssl_context=self.ssl_context, deadline=deadline
        )
        try:
            with source:
                source.open()
                logger.info(
                    "copying the model",
                    extra={"source": source.display_url, "size": source.size, "location": upload.location},
                )
                result = upload.write(
                    source.readinto, size=source.size, deadline=deadline, source=source.display_url
                )
        except ModelCopyTimeoutError:
            raise ModelCopyTimeoutError(_timeout_reason(source, started, deadline)) from None
        logger.info(
            "model copied",
            extra={
                "location": upload.location,
                "size": result.size,
                "seconds": round(result.seconds, 1),
                "mib_per_s": round(result.mib_per_s, 1),
                "resumes": source.resumes,
            },
        )
        return _data(result.sha256, result.size, result.version_id, copied=True)


def _log_progress(location: str) -> ThrottledProgress:
    """Logs the copy's progress every 10 s."""

    def report(copied: int, size: int | None, mib_per_s: float) -> None:
        logger.info(
            "copy progress",
            extra={"location": location, "copied": copied, "size": size, "mib_per_s": round(mib_per_s, 1)},
        )

    return ThrottledProgress(report, every_s=10.0)


def _timeout_reason(source: HTTPSource, started: float, deadline: float | None) -> str:
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = source.offset / MiB / elapsed
    budget = (deadline - started) if deadline is not None else elapsed
    total = f"{source.size / MiB:.0f} MiB" if source.size is not None else "an unknown size"
    return (
        f"the copy of {source.display_url} did not finish in time: {source.offset / MiB:.0f} MiB of {total} "
        f"in {elapsed:.0f} s ({rate:.1f} MiB/s). At that rate the function copies about "
        f"{rate * budget / 1024:.1f} GiB before its timeout. Upload the file with "
        "`snapllm model push FILE --stack STACK` instead and leave ModelSource empty"
    )


def _data(sha256: str, size: int, version_id: str | None, *, copied: bool) -> dict[str, str]:
    return {"Sha256": sha256, "Size": str(size), "VersionId": version_id or "", "Copied": str(copied).lower()}


def _response(
    request: CustomResourceRequest,
    status: str,
    physical_id: str,
    *,
    reason: str = "",
    data: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    return {
        "Status": status,
        "Reason": reason or status.lower(),
        "PhysicalResourceId": physical_id,
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_resource_id,
        "NoEcho": False,
        "Data": dict(data or {}),
    }
