"""Named exceptions. Every error a caller can act on has its own class.

Request errors carry what the OpenAI error shape needs (``type``, ``param``) and an HTTP status, so the
inference function and the router render them the same way::

    try:
        request = parse_request(event)
    except RequestError as exc:
        return exc.to_response()
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


class SnapllmError(Exception):
    """Base class of every error snapllm raises on purpose."""


# --- Model loading ---------------------------------------------------------------------------------------


class ModelLoadError(SnapllmError):
    """The model could not be brought into memory; the message says which object and why."""


class ModelNotFoundError(ModelLoadError):
    """The bucket or the key does not exist."""


class ModelAccessDeniedError(ModelLoadError):
    """The function's role may not read the object (or the bucket hides its existence)."""


class ModelSizeMismatchError(ModelLoadError):
    """A part, or the whole object, arrived with a different number of bytes than S3 announced."""


class ModelChangedError(ModelLoadError):
    """The object was replaced while it was being downloaded (its ETag changed between requests)."""


class ChecksumMismatchError(ModelLoadError):
    """The SHA-256 of the downloaded bytes differs from the configured or published digest."""


class NotAGGUFError(ModelLoadError):
    """The object is not a GGUF file (bad magic) or uses a GGUF version llama.cpp cannot read."""


class ModelDownloadError(ModelLoadError):
    """Transient download failures persisted after every retry."""


class ConfigurationError(SnapllmError):
    """An environment variable or setting has an invalid value."""


# --- Putting a model in place (the ModelSource custom resource, `snapllm model push`) ---------------------


class ModelCopyError(SnapllmError):
    """The model could not be copied into the bucket; nothing was written (the multipart upload is aborted).

    The message is what CloudFormation shows as the reason a stack operation failed.
    """


class ModelCopyInputError(ModelCopyError):
    """A property of the copy is invalid: a URL that is not https://, a digest that is not 64 hex digits."""


class ModelSourceHTTPError(ModelCopyError):
    """The source URL answered with an error status that retrying does not fix (404, 403, 410...)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelSourceResumeError(ModelCopyError):
    """The connection dropped and the server cannot continue where it stopped (it ignores Range requests,
    or the file changed), so the copy cannot go on without starting over."""


class ModelSourceDownloadError(ModelCopyError):
    """Transient failures (resets, early ends, stalls, 5xx) persisted after every attempt."""


class ModelCopySizeError(ModelCopyError):
    """The bytes received differ in number from what the source announced."""


class ModelDigestMismatchError(ModelCopyError):
    """The SHA-256 of the bytes copied differs from the expected digest (``ModelSha256``)."""


class ModelCopyTimeoutError(ModelCopyError):
    """The copy would not finish before the function's deadline; the message says how far it got and how
    fast, and what to do instead."""


class ModelUploadError(ModelCopyError):
    """S3 refused or failed a request of the upload (access denied, missing bucket, persistent 5xx)."""


class StackError(SnapllmError):
    """A deployed stack cannot be read or updated: it does not exist, lacks what this project's template
    gives it (the ``ModelBucket`` output, the ``ModelKey`` parameter), or its update failed or rolled back."""


class CustomResourceResponseError(SnapllmError):
    """CloudFormation's response URL could not be reached, or refused the response (an expired URL)."""


# --- Requests --------------------------------------------------------------------------------------------


#: The header that carries a request's id on every HTTP answer, errors included, as OpenAI's API sends it
#: (the official SDKs expose it as ``response._request_id``).
REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9=+/_.:-]{1,128}")


def request_id_or_new(candidate: object) -> str:
    """``candidate`` as the answer's request id when it is a plain id (letters, digits, ``=+/_.:-``, at
    most 128 characters: what API Gateway and Lambda mint), else a new one: a header value taken from a
    request must not carry line breaks or anything else into the answer's headers."""
    if isinstance(candidate, str) and _REQUEST_ID.fullmatch(candidate):
        return candidate
    return str(uuid.uuid4())


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


@dataclass(frozen=True)
class HttpResponse:
    """A response as an HTTP server sends it: each app hands it to its framework's response class (the
    router to Powertools', the streaming app to Starlette's) or to API Gateway as it is."""

    status_code: int
    headers: dict[str, str]
    body: str

    def to_lambda(self) -> dict[str, Any]:
        """The response an HTTP API (payload 2.0) integration or a Function URL takes from a function."""
        return {
            "statusCode": self.status_code,
            "headers": self.headers,
            "body": self.body,
            "isBase64Encoded": False,
        }


class RequestError(SnapllmError):
    """An error a request is answered with, in the OpenAI error shape, with its HTTP status and headers.

    4xx subclasses are requests the caller must change before retrying; the 5xx ones are failures of the
    service (an inference invoke that failed, timed out or was throttled: 502, 504, 429).

    Example::

        raise InvalidRequestError("temperature must be between 0 and 2", param="temperature")
    """

    status_code = 400
    error_type = "invalid_request_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def to_body(self) -> dict[str, Any]:
        """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""
        detail = ErrorDetail(message=self.message, type=self.error_type, param=self.param, code=self.code)
        return ErrorResponse(error=detail).model_dump(mode="json")

    def to_response(self) -> dict[str, Any]:
        """The direct-invoke error response: the error body plus a 4xx-style ``statusCode``."""
        return {"statusCode": self.status_code, **self.to_body()}

    def to_http(self) -> HttpResponse:
        """The HTTP error response: this error's status and headers, the OpenAI error object as JSON."""
        headers = {"Content-Type": "application/json", **self.headers}
        return HttpResponse(self.status_code, headers, json.dumps(self.to_body()))

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers that belong with this error's status (``Allow`` with a 405, for example)."""
        return {}


class InvalidRequestError(RequestError):
    """A field is missing, has the wrong type or is out of range."""


class UnsupportedParameterError(RequestError):
    """The request asks for something snapllm does not do (``n > 1``, audio, an unenforceable schema...)."""

    code = "unsupported_parameter"


class ContextLengthExceededError(RequestError):
    """The prompt does not fit in the model's context window."""

    code = "context_length_exceeded"


class ToolCallCutShortError(RequestError):
    """The answer was cut (by ``max_tokens``, or by the deadline: then a 504) inside a tool call, before the
    function's name was decided: there is no call to return, and as text it would be a broken call."""

    code = "tool_call_cut_short"


class SchemaValidationFailedError(RequestError):
    """A complete structured answer does not validate against the request's schema, on a constraint the
    grammar could not hold (``uniqueItems``, ``not``, a lookaround...): it is not returned as if it passed.
    422: the request was well formed, and the model's answer to it could not be accepted."""

    status_code = 422
    code = "schema_validation_failed"


class ServerError(RequestError):
    """An unexpected failure inside the function. The message never includes a stack trace."""

    status_code = 500
    error_type = "server_error"
    code = "internal_error"


class UnknownModelError(RequestError):
    """The request names a model this deployment does not serve."""

    status_code = 404
    code = "model_not_found"


class RouteNotFoundError(RequestError):
    """No route serves this path."""

    status_code = 404
    code = "unknown_url"


class MethodNotAllowedError(RequestError):
    """The path exists, but not with this method; ``allow`` lists the methods it has."""

    status_code = 405
    code = "method_not_allowed"

    def __init__(self, message: str, *, allow: Iterable[str]) -> None:
        super().__init__(message)
        self.allow = sorted(allow)

    @property
    def headers(self) -> dict[str, str]:
        return {"Allow": ", ".join(self.allow)}


class InvalidApiKeyError(RequestError):
    """The request carries no API key, a malformed one, or one this deployment does not know
    (``ApiAuth=KEY``): OpenAI's 401. The message says which (no key, a malformed header, an incorrect key),
    never anything of a stored key."""

    status_code = 401
    code = "invalid_api_key"

    @property
    def headers(self) -> dict[str, str]:
        # RFC 6750: a 401 names the scheme it wants.
        return {"WWW-Authenticate": "Bearer"}


class HeadersTooLargeError(RequestError):
    """The request's headers are larger than the front door accepts."""

    status_code = 431
    code = "request_header_fields_too_large"


class PayloadTooLargeError(RequestError):
    """The request body is larger than the configured limit; it was not parsed."""

    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaTypeError(RequestError):
    """The request body is not JSON (``Content-Type`` other than ``application/json``)."""

    status_code = 415
    code = "unsupported_media_type"


# --- Calling the inference function ------------------------------------------------------------------------


class InferenceInvokeError(RequestError):
    """Invoking the inference function failed; the status is what the caller answers with."""

    status_code = 502
    error_type = "api_error"
    code = "inference_failed"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class InferenceThrottledError(InferenceInvokeError):
    """Lambda throttled the invoke after every retry (concurrency or rate limit)."""

    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float | None = 1.0) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class InferenceNotReadyError(InferenceInvokeError):
    """The inference version cannot take invokes yet: a SnapStart snapshot being (re-)optimised, a restore
    over Lambda's 10 s limit, or a function still being created. Retrying shortly succeeds."""

    status_code = 503
    error_type = "service_unavailable"
    code = "model_not_ready"

    def __init__(self, message: str, *, retry_after_s: float | None = 5.0) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class InferenceTimeoutError(InferenceInvokeError):
    """The inference function did not answer within the caller's deadline."""

    status_code = 504
    error_type = "timeout_error"
    code = "timeout"


class InferenceFailedError(InferenceInvokeError):
    """The inference function raised, crashed or answered with a 5xx."""


class DeadlineExceededError(RequestError):
    """The request's work did not fit before its deadline, and there is nothing to return: the prompt, or a
    rerank's documents, were not all evaluated (an answer the deadline cuts after its first token comes
    back with what it has instead). Behind the router the deadline is API Gateway's 30 s less a margin. The
    message says how far the work got and what to send instead. ``x-should-retry: false`` tells the OpenAI
    SDKs, which retry a 5xx, that the same request would meet the same limit."""

    status_code = 504
    error_type = "timeout_error"
    code = "deadline_exceeded"

    @property
    def headers(self) -> dict[str, str]:
        return {"x-should-retry": "false"}


def _request_errors() -> list[type[RequestError]]:
    found: list[type[RequestError]] = []
    pending: list[type[RequestError]] = [RequestError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def error_from_body(status: int, body: dict[str, Any]) -> RequestError:
    """The error a function answered with (``{"statusCode", "error": {...}}``), as the class it was raised as.

    A caller of the function (the router, the agent) then handles and renders it like its own errors: the
    status, type, code and param travel unchanged. A 5xx becomes :class:`InferenceFailedError`, which the
    caller answers with a 502.
    """
    detail = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = str(detail.get("message") or "the model function failed")
    code, param = detail.get("code"), detail.get("param")
    # A function's own deadline is the caller's too: passed on as it is, not as a failed invoke.
    if status >= 500 and (status, code) != (DeadlineExceededError.status_code, DeadlineExceededError.code):
        return InferenceFailedError(f"the model function failed: {message}")
    param = param if isinstance(param, str) else None
    matching = [
        cls
        for cls in _request_errors()
        if cls.status_code == status and cls.code == code and cls.__init__ is RequestError.__init__
    ]
    if matching:  # the most specific class, e.g. UnknownModelError rather than a bare 404
        return max(matching, key=lambda cls: len(cls.__mro__))(message, param=param)
    error = RequestError(message, param=param, code=code)
    error.status_code = status if 400 <= status < 500 else 400
    error.error_type = str(detail.get("type") or RequestError.error_type)
    return error
