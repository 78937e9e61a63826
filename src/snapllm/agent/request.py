"""The run's input: ``{task, documents: [s3 uris], approval: {required, timeout}}``.

``timeout`` is seconds (an integer) or a string such as ``"45s"``, ``"30m"``, ``"72h"``, ``"3d"``::

    run = AgentRequest.parse({"task": "Review", "documents": ["s3://b/agent/documents/a.md"],
                              "approval": {"required": True, "timeout": "3d"}})
    run.approval.timeout_s   # 259200
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, WithJsonSchema, field_validator

from snapllm.agent.errors import AgentInputError
from snapllm.protocol.requests import STRICT, RequestBody

_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_APPROVAL_TIMEOUT_S = 366 * 86400
# s3://bucket/key, where the key names an object (not empty, not a "folder").
S3_OBJECT_URI = r"^s3://[^/]+/(.*[^/])$"
_TIMEOUT_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 1, "maximum": MAX_APPROVAL_TIMEOUT_S},
        {"type": "string", "pattern": r"^\s*\d+\s*[smhdSMHD]?\s*$"},
    ],
    "description": "seconds, or a number with s, m, h or d (e.g. '3d')",
}


class ApprovalPolicy(BaseModel):
    model_config = STRICT

    required: bool = False
    # Documented as what clients may send; validated as seconds once _duration has converted it.
    timeout_s: Annotated[int, WithJsonSchema(_TIMEOUT_SCHEMA)] = Field(
        default=3 * 86400, alias="timeout", ge=1, le=MAX_APPROVAL_TIMEOUT_S
    )

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = _DURATION.match(value.lower())
            if not match:
                raise ValueError("timeout must be seconds or a number with s, m, h or d (e.g. '3d')")
            return int(match.group(1)) * _UNIT_S[match.group(2)]
        return value


class AgentRequest(RequestBody):
    task: str = Field(min_length=1, max_length=4000)
    documents: list[Annotated[str, Field(pattern=S3_OBJECT_URI, max_length=2048)]] = Field(
        default_factory=list
    )
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)

    @classmethod
    def parse(cls, event: Any, *, max_documents: int) -> AgentRequest:
        if not isinstance(event, dict):
            raise AgentInputError("the run's input must be a JSON object {task, documents, approval}")
        try:
            request = cls.model_validate(event)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            raise AgentInputError(f"invalid agent input: {details}") from None
        if len(request.documents) > max_documents:
            raise AgentInputError(f"at most {max_documents} documents per run, got {len(request.documents)}")
        if len(set(request.documents)) != len(request.documents):
            raise AgentInputError("documents must not repeat")
        return request
