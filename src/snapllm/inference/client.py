"""Call the inference function through Lambda ``Invoke`` (locally: :mod:`snapllm_dev.local.inference`), or
an always-on OpenAI-compatible HTTP endpoint in its place, behind one :class:`InferenceClient` protocol.

    response = LambdaInferenceClient(function_arn=alias_arn).invoke({"messages": [...], "max_tokens": 64})

``invoke`` returns the completion or raises a :class:`~snapllm.errors.RequestError` with the status to answer
(the function's 4xx as the class it was raised as; else 429, 504 or 502): no caller reads a payload's status.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

from snapllm.errors import (
    InferenceFailedError,
    InferenceInvokeError,
    InferenceNotReadyError,
    InferenceThrottledError,
    InferenceTimeoutError,
    RequestError,
    error_from_body,
)
from snapllm.inference.deadline import CALLER_DEADLINE_KEY
from snapllm.protocol.http.routes import ROUTE_KEY
from snapllm.retry import backoff_s

# Errors only AWS produces for a version that cannot take invokes for now: a SnapStart version that is
# being optimised or was left uninvoked for 14 days (then re-optimised), a restore that overran its 10 s,
# a function still being created or updated. A caller should retry: 503 with Retry-After, not a 502.
NOT_READY_ERRORS = frozenset(
    {"SnapStartNotReadyException", "SnapStartTimeoutException", "ResourceNotReadyException"}
)


class InferenceClient(Protocol):
    """Anything that can run one direct invoke of the inference function.

    ``deadline`` (Unix epoch seconds) is when the caller stops waiting; the function stops generating by
    then. Without one, a client uses its own timeout.
    """

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]: ...


def client_context(deadline: float) -> str:
    """The base64 ``ClientContext`` that carries a caller's deadline to the inference function."""
    custom = {"custom": {CALLER_DEADLINE_KEY: int(deadline * 1000)}}
    return base64.b64encode(json.dumps(custom).encode()).decode()


class LambdaInferenceClient:
    """Invokes a qualified inference alias (``...:live``), retrying throttles with jittered backoff.

    ``read_timeout_s`` bounds the whole call: behind API Gateway (30 s) keep it below that. ``endpoint_url``
    replaces the Lambda API's endpoint for this client only (a local stand-in such as ``sam local
    start-lambda``), where ``AWS_ENDPOINT_URL_LAMBDA`` already names another service.
    """

    def __init__(
        self,
        function_arn: str,
        *,
        lambda_client: Any = None,
        endpoint_url: str | None = None,
        read_timeout_s: float = 28.0,
        max_attempts: int = 3,
        backoff_base_s: float = 0.2,
    ) -> None:
        if lambda_client is None:
            lambda_client = boto3.client(
                "lambda",
                endpoint_url=endpoint_url or None,
                config=Config(
                    connect_timeout=2,
                    read_timeout=read_timeout_s,
                    # Throttles are retried here, with the caller's budget in mind, not by botocore.
                    retries={"mode": "standard", "total_max_attempts": 1},
                ),
            )
        self._lambda = lambda_client
        self.function_arn = function_arn
        self._read_timeout_s = read_timeout_s
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        # This client gives up after its read timeout: the function need not generate beyond that.
        context = client_context(deadline if deadline is not None else time.time() + self._read_timeout_s)
        for attempt in range(self._max_attempts):
            try:
                response = self._lambda.invoke(
                    FunctionName=self.function_arn,
                    InvocationType="RequestResponse",
                    Payload=json.dumps(payload).encode(),
                    ClientContext=context,
                )
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in {"TooManyRequestsException", "ThrottlingException"}:
                    if attempt + 1 < self._max_attempts:
                        time.sleep(backoff_s(attempt + 1, base_s=self._backoff_base_s))
                        continue
                    raise InferenceThrottledError(
                        "the model is at its concurrency limit; retry shortly", retry_after_s=1.0
                    ) from exc
                if code in NOT_READY_ERRORS:
                    raise InferenceNotReadyError(
                        f"the model is not ready to answer yet ({code}); retry in a few seconds"
                    ) from exc
                raise InferenceFailedError(f"invoking the model failed: {code}") from exc
            except (ReadTimeoutError, ConnectTimeoutError) as exc:
                raise InferenceTimeoutError("the model did not answer in time") from exc
            body = json.loads(response["Payload"].read() or b"null")
            if response.get("FunctionError"):
                message = body.get("errorMessage", "unhandled error") if isinstance(body, dict) else str(body)
                raise InferenceFailedError(f"the model function failed: {message}")
            return checked_response(body)
        raise AssertionError("unreachable")


def is_endpoint(target: str) -> bool:
    """Whether a routing-table target is an always-on endpoint's base URL rather than a Lambda ARN."""
    return target.startswith(("http://", "https://"))


class HttpInferenceClient:
    """Sends the request to an always-on OpenAI-compatible endpoint (``base_url`` ends in ``/v1``).

    The same errors as a Lambda invoke come out of it, so the router answers and falls back alike: 429 ->
    :class:`InferenceThrottledError`; 503, or nothing listening -> :class:`InferenceNotReadyError`; other
    5xx, a reset or a closed connection -> :class:`InferenceFailedError` (502); no answer before the
    deadline -> :class:`InferenceTimeoutError` (504); the endpoint's own 4xx as the error it names.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, read_timeout_s: float = 28.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._read_timeout_s = read_timeout_s

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        url = self._url(payload)
        if ROUTE_KEY in payload:
            payload = payload["body"]
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(
            url, data=json.dumps(payload).encode(), headers=headers, method="POST"
        )
        timeout = self._read_timeout_s
        if deadline is not None:
            timeout = max(0.05, min(timeout, deadline - time.time()))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._status_error(exc.code, exc.read()) from exc
        except TimeoutError as exc:
            raise InferenceTimeoutError("the model did not answer in time") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                raise InferenceTimeoutError("the model did not answer in time") from exc
            raise InferenceNotReadyError(f"the model's endpoint is not reachable ({exc.reason})") from exc
        except (ConnectionError, http.client.HTTPException) as exc:
            raise InferenceFailedError(
                f"the model's endpoint broke the connection ({type(exc).__name__})"
            ) from exc
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise InferenceFailedError(
                "the model's endpoint answered with something that is not JSON"
            ) from exc
        return checked_response(body)

    def _url(self, payload: dict[str, Any]) -> str:
        """Where the endpoint serves ``payload``: a routed event's route (``/v1/...`` under the base URL,
        llama-server's ``/tokenize`` and ``/detokenize`` at its root), else the completion's kind."""
        route = payload.get(ROUTE_KEY)
        if isinstance(route, str):
            if route.startswith("/v1/"):
                return self.base_url + route.removeprefix("/v1")
            return self.base_url.removesuffix("/v1") + route
        # A Responses request goes to the endpoint's own /responses: it must serve that route itself.
        if "input" in payload:
            return self.base_url + "/responses"
        return self.base_url + ("/chat/completions" if "messages" in payload else "/completions")

    @staticmethod
    def _status_error(status: int, raw: bytes) -> InferenceInvokeError | RequestError:
        if status == 429:
            return InferenceThrottledError("the model's endpoint is at its limit; retry shortly")
        if status == 503:
            return InferenceNotReadyError("the model's endpoint is unavailable; retry shortly")
        if status >= 500:
            return InferenceFailedError(f"the model's endpoint failed with HTTP {status}")
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        return error_from_body(status, body if isinstance(body, dict) else {})


def checked_response(body: Any) -> dict[str, Any]:
    """The completion in a function's response, or the error it answered with, raised."""
    if not isinstance(body, dict):
        raise InferenceFailedError("the model function returned a malformed response")
    status = body.get("statusCode")
    if isinstance(status, int) and status >= 400:
        raise error_from_body(status, body)
    return body
