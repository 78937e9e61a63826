"""Build API Gateway HTTP API (payload format 2.0) events from HTTP requests, as API Gateway does.

The local server turns each request into one of these and hands it to the router's Lambda handler::

    event = http_api_event("POST", "/v1/chat/completions", body=b'{"messages": [...]}',
                           headers={"content-type": "application/json"})
    router.handler(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any


def _is_text(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return (
        kind.startswith("text/")
        or kind.endswith(("json", "xml"))
        or kind in {"", "application/x-www-form-urlencoded"}
    )


def http_api_event(
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    query: str = "",
    source_ip: str = "127.0.0.1",
    request_id: str | None = None,
    stage: str = "$default",
) -> dict[str, Any]:
    """The event API Gateway sends for one request (lower-cased headers; repeated ones joined by commas)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in pairs:
        key = name.lower()
        if key == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    query_parameters: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        query_parameters[key] = f"{query_parameters[key]},{value}" if key in query_parameters else value
    now = time.time()
    text = _is_text(merged.get("content-type", ""))
    try:
        decoded = body.decode() if text else None
    except UnicodeDecodeError:
        decoded = None
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": merged,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": merged.get("host", "127.0.0.1"),
            "domainPrefix": "local",
            "http": {
                "method": method.upper(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": request_id or uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": stage,
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": decoded is None and bool(body),
    }
    if cookies:
        event["cookies"] = cookies
    if query_parameters:
        event["queryStringParameters"] = query_parameters
    if body:
        event["body"] = decoded if decoded is not None else base64.b64encode(body).decode()
    return event
