"""Named exceptions. Every error a caller can act on has its own class.

Request errors carry what the OpenAI error shape needs (``type``, ``param``) and an HTTP status, so the
inference function and the router render them the same way::

    try:
        request = parse_request(event)
    except RequestError as exc:
        return exc.to_response()
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


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


# --- Requests --------------------------------------------------------------------------------------------


class RequestError(SnapllmError):
    """A request the caller must change before retrying. Renders as an OpenAI-style error body.

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
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_response(self) -> dict[str, Any]:
        """The direct-invoke error response: the error body plus a 4xx-style ``statusCode``."""
        return {"statusCode": self.status_code, **self.to_body()}

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers that belong with this error's status (``Allow`` with a 405, for example)."""
        return {}


class InvalidRequestError(RequestError):
    """A field is missing, has the wrong type or is out of range."""


class UnsupportedParameterError(RequestError):
    """The request asks for something snapllm does not do (``n > 1``, tools, logprobs...)."""

    code = "unsupported_parameter"


class ContextLengthExceededError(RequestError):
    """The prompt does not fit in the model's context window."""

    code = "context_length_exceeded"


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


class InferenceInvokeError(SnapllmError):
    """Invoking the inference function failed; ``status_code`` is what an HTTP API should answer."""

    status_code = 502
    error_type = "api_error"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class InferenceThrottledError(InferenceInvokeError):
    """Lambda throttled the invoke after every retry (concurrency or rate limit)."""

    status_code = 429
    error_type = "rate_limit_error"


class InferenceTimeoutError(InferenceInvokeError):
    """The inference function did not answer within the caller's deadline."""

    status_code = 504
    error_type = "timeout_error"


class InferenceFailedError(InferenceInvokeError):
    """The inference function raised, crashed or answered with a 5xx."""
