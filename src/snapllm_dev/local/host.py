"""The process that plays one Lambda function: ``python -m snapllm_dev.local.host ADDRESS``.

It connects back to :class:`snapllm_dev.local.lifecycle.LocalFunction`, which drives it: ``init`` imports the
handler module (module init, as in Lambda's init phase), ``snapshot`` runs the before-snapshot hooks, and
``restore`` forks. The forked child is one restored execution environment: it starts from the host's
memory exactly as every SnapStart environment starts from the same snapshot, runs the after-restore hooks,
then serves invokes on its own connection.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import resource
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from snapshot_restore_py import get_after_restore, get_before_snapshot

from snapllm.system import peak_rss_bytes, rss_bytes
from snapllm.timing import phases
from snapllm_dev.local.context import LocalContext


def connect(address: str) -> Connection:
    """A connection to the driving process's socket (which lives in a private, mode-0700 directory)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    return Connection(sock.detach())


def _commands(conn: Connection) -> Iterator[tuple[str, Any]]:
    """The driver's ``(command, payload)`` messages, until it says ``exit`` or hangs up."""
    while True:
        try:
            command, payload = conn.recv()
        except EOFError:
            return
        if command == "exit":
            return
        yield command, payload


def _measured(**result: Any) -> dict[str, Any]:
    memory = {"rss_bytes": rss_bytes(), "peak_rss_bytes": peak_rss_bytes()}
    return {**result, "phases": phases.as_dict(), **memory}


def _page_faults() -> dict[str, int]:
    """This process's page faults so far: minor (the page was in memory, only unmapped) and major."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"minor": usage.ru_minflt, "major": usage.ru_majflt}


def _error(exc: BaseException) -> dict[str, Any]:
    # Lambda's own error payload shape for an unhandled exception.
    return {
        "errorType": type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_exception(exc),
    }


def _runtime_error(kind: str, exc: BaseException) -> dict[str, Any]:
    # The runtime's own failures carry no stack trace of the function's code.
    return {"errorType": kind, "errorMessage": f"{type(exc).__name__}: {exc}", "stackTrace": []}


class _Host:
    def __init__(self, address: str) -> None:
        self.address = address
        self.handler: Any = None

    def init(self, code_dir: str, module: str, function: str) -> dict[str, Any]:
        sys.path.insert(0, code_dir)
        os.chdir(code_dir)
        started = time.perf_counter()
        self.handler = getattr(importlib.import_module(module), function)
        return _measured(init_s=time.perf_counter() - started)

    def snapshot(self) -> dict[str, Any]:
        started = time.perf_counter()
        for func, args, kwargs in reversed(get_before_snapshot()):
            func(*args, **kwargs)
        return _measured(seconds=time.perf_counter() - started)

    def restore(self, function_name: str, timeout_s: float, memory_mb: int) -> int:
        pid = os.fork()
        if pid:
            return pid
        try:
            self._serve_restored(function_name, timeout_s, memory_mb)
        finally:
            os._exit(0)

    def _serve_restored(self, function_name: str, timeout_s: float, memory_mb: int) -> None:
        started = time.perf_counter()
        conn = connect(self.address)
        try:
            for func, args, kwargs in get_after_restore():
                func(*args, **kwargs)
        except Exception as exc:
            conn.send({"error": _error(exc)})
            return
        conn.send({"restore_s": time.perf_counter() - started, "pid": os.getpid()})
        for _, (event, custom) in _commands(conn):
            context = LocalContext.create(
                function_name, timeout_s=timeout_s, memory_mb=memory_mb, custom=custom
            )
            conn.send(self._invoke(event, context))

    def _invoke(self, event: str | bytes, context: LocalContext) -> dict[str, Any]:
        """What Lambda's runtime does with one event: decode the JSON, call the handler, encode the result."""
        invoked = time.perf_counter()
        faults_before = _page_faults()
        try:
            decoded = json.loads(event)
        except (ValueError, RecursionError) as exc:
            return {"error": _runtime_error("Runtime.UnmarshalError", exc), "duration_s": 0.0}
        try:
            response = self.handler(decoded, context)
        except Exception as exc:
            return {"error": _error(exc), "duration_s": time.perf_counter() - invoked}
        duration_s = time.perf_counter() - invoked
        faults = {kind: after - faults_before[kind] for kind, after in _page_faults().items()}
        try:
            return {"response": json.loads(json.dumps(response)), "duration_s": duration_s, "faults": faults}
        except (TypeError, ValueError, RecursionError) as exc:
            return {"error": _runtime_error("Runtime.MarshalError", exc), "duration_s": duration_s}


def main() -> None:
    address = sys.argv[1]
    # numpy's OpenBLAS starts a thread per extra core at import, which snapllm never gives work: without
    # them, the restore's fork copies a process of one thread, as fork() can do safely.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("SNAPLLM_LOG_LEVEL", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # Restored environments are this process's children; let the kernel reap them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    host = _Host(address)
    conn = connect(address)
    for command, payload in _commands(conn):
        try:
            result = getattr(host, command)(**payload)
            conn.send({"result": result})
        except Exception as exc:
            conn.send({"error": _error(exc)})


if __name__ == "__main__":
    main()
