"""Answers to CloudFormation's custom resource requests: a PUT to the request's ``ResponseURL``, retried, each
attempt ending before the function's deadline (docs/deploy.md).

    send_response(event["ResponseURL"], body, deadline=deadline_from(context, RESPONSE_RESERVE_S))

Standard library only: ``snapllm deploy-check`` reads a function's imports to list the AWS calls its role
must allow, and answering makes none.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from snapllm import retry
from snapllm.errors import CustomResourceResponseError

SUCCESS, FAILED = "SUCCESS", "FAILED"
#: Seconds kept between the last attempt to answer CloudFormation and the function's deadline, for the
#: function to log the outcome and return.
RESPONSE_RESERVE_S = 2.0
#: An attempt to answer is not started with less time than this left: it could not complete.
_MIN_ATTEMPT_S = 0.5


def deadline_from(context: Any, margin_s: float) -> float | None:
    """The invoke's deadline less ``margin_s``, as a ``time.monotonic()`` value; None without a context."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + remaining() / 1000.0 - margin_s


class ResponseSender(Protocol):
    def __call__(self, url: str, body: Mapping[str, Any], *, deadline: float | None = None) -> None: ...


def send_response(
    url: str,
    body: Mapping[str, Any],
    *,
    deadline: float | None = None,
    attempts: int = 5,
    timeout_s: float = 10.0,
    backoff_s: float = 1.0,
) -> None:
    """PUT the response to CloudFormation's pre-signed ``url``, retrying connection failures, stalls and 5xx.

    Each attempt ends after ``timeout_s`` whatever the URL does (a server that accepts and never answers,
    or trickles its answer, included); with a ``deadline`` (a ``time.monotonic()`` value) no attempt or
    backoff reaches past it: the schedule is cut to the time there is.

    Raises:
        CustomResourceResponseError: A 4xx (e.g. an expired URL), or every attempt the time allowed failed.
    """
    data = json.dumps(body).encode()
    last: object = None
    made = 0
    for attempt in range(attempts):
        if attempt:
            pause = retry.backoff_s(attempt, base_s=backoff_s)
            if deadline is not None and deadline - time.monotonic() - pause < _MIN_ATTEMPT_S:
                break
            time.sleep(pause)
        budget = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if budget < _MIN_ATTEMPT_S:
            break
        made += 1
        try:
            status, reason = _put(url, data, budget)
        except (OSError, http.client.HTTPException) as exc:
            last = exc
            continue
        if status < 300:
            return
        if status < 500:
            raise CustomResourceResponseError(
                f"CloudFormation's response URL refused the response: {status} {reason}"
            )
        last = f"{status} {reason}"
    within = " before the function's deadline" if made < attempts else ""
    raise CustomResourceResponseError(
        f"cannot deliver the response to CloudFormation{within} after {made} attempts: {last}"
    )


def _put(url: str, data: bytes, budget_s: float) -> tuple[int, str]:
    """One PUT of ``data``, ended after ``budget_s`` whatever the server does; (status, reason)."""
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=budget_s)

    ended = threading.Event()

    def end_attempt() -> None:
        # The socket's timeout bounds each wait; this bounds the attempt (an answer sent a byte at a time).
        ended.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(budget_s, end_attempt)
    timer.daemon = True
    timer.start()
    try:
        # The URL is signed without a content type: send an empty one.
        connection.request("PUT", target, body=data, headers={"Content-Type": ""})
        response = connection.getresponse()
        response.read()
    except (OSError, http.client.HTTPException):
        if not ended.is_set():
            raise
    finally:
        timer.cancel()
        connection.close()
    if ended.is_set():  # what came before the cut may even parse, but it is not the whole answer
        raise TimeoutError(f"no complete answer within {budget_s:.1f} s")
    return response.status, response.reason
