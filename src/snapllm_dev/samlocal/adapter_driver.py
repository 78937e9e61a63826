"""Drives a web-adapter function's app inside its container as Lambda Web Adapter would; stdlib only.

Run with the image's Python inside the running container (``docker exec -i C python3.13 - < this file``),
with the adapter's variables in the container's environment. It waits for the readiness check, calls the
SnapStart hooks (before-checkpoint, then after-restore), sends a streamed chat completion and a request the
app must refuse, and prints one JSON object: what each step answered and how long it took.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

PORT = os.environ.get("AWS_LWA_PORT") or os.environ.get("PORT") or "8080"
BASE = f"http://127.0.0.1:{PORT}"
READY_TIMEOUT_S = 300.0


def _request(method: str, path: str, body: Any = None, timeout: float = 120.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        return error


def _wait_ready(path: str) -> dict[str, Any]:
    started = time.monotonic()
    while time.monotonic() - started < READY_TIMEOUT_S:
        try:
            with _request("GET", path, timeout=2) as response:
                if response.status < 500:
                    return {"status": response.status, "seconds": time.monotonic() - started}
        except OSError:
            pass
        time.sleep(0.2)
    return {"status": None, "seconds": time.monotonic() - started}


def _hook(variable: str) -> dict[str, Any] | None:
    path = os.environ.get(variable)
    if not path:
        return None
    started = time.monotonic()
    with _request("POST", path) as response:
        response.read()
        return {"path": path, "status": response.status, "seconds": time.monotonic() - started}


def _stream(body: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    first = None
    events = []
    with _request("POST", "/v1/chat/completions", body) as response:
        content_type = response.headers.get("Content-Type", "")
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            if first is None:
                first = time.monotonic() - started
            events.append(line[len("data:") :].strip())
        status = response.status
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    text = "".join(
        (choice.get("delta") or {}).get("content") or ""
        for chunk in chunks
        for choice in chunk.get("choices", [])
    )
    return {
        "status": status,
        "content_type": content_type,
        "chunks": len(chunks),
        "done": bool(events) and events[-1] == "[DONE]",
        "text": text,
        "first_event_seconds": first,
        "seconds": time.monotonic() - started,
    }


def _refused(body: dict[str, Any]) -> dict[str, Any]:
    with _request("POST", "/v1/chat/completions", body) as response:
        return {"status": response.status, "body": json.loads(response.read() or b"null")}


def main() -> None:
    report = {"readiness": _wait_ready(os.environ.get("AWS_LWA_READINESS_CHECK_PATH") or "/")}
    if report["readiness"]["status"] is None:
        print(json.dumps(report))
        return
    report["before_checkpoint"] = _hook("AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH")
    report["after_restore"] = _hook("AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH")
    messages = [{"role": "user", "content": "Name a primary colour."}]
    report["stream"] = _stream({"messages": messages, "max_tokens": 16, "seed": 7, "stream": True})
    report["refused"] = _refused({"messages": messages, "temperature": 7, "stream": True})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
