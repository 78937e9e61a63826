"""Play a Lambda function's lifecycle locally: init, before-snapshot, restore, invoke.

Each restore forks the snapshotted process, so restored environments start from identical memory::

    with LocalFunction(spec, local=local, overrides={"SNAPLLM_THREADS": "1"}) as function:
        function.init(); function.snapshot()    # module init in a fresh interpreter, before-snapshot hooks
        with function.restore() as env: env.invoke({"prompt": "Hello", "max_tokens": 8})
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from snapllm.errors import ConfigurationError, SnapllmError
from snapllm_dev.local.environment import function_environment
from snapllm_dev.local.processes import Closing, stop_process
from snapllm_dev.sam import Function


class LocalFunctionError(SnapllmError):
    """The function failed in a lifecycle phase; the message holds the function's own error, in one line."""

    def __init__(self, phase: str, error: dict[str, Any]) -> None:
        self.phase = phase
        self.error = error
        #: The function's stack trace, kept apart: a command prints the one line, not the function's stack.
        self.trace = "".join(error.get("stackTrace", []))
        message = " ".join(str(error.get("errorMessage")).split())
        super().__init__(f"{phase} failed: {error.get('errorType')}: {message}")

    @property
    def is_configuration_error(self) -> bool:
        """The function refused its configuration (a variable, the model file): the caller's to fix."""
        return self.error.get("errorType") == ConfigurationError.__name__

    @classmethod
    def died(cls, phase: str, message: str) -> LocalFunctionError:
        return cls(phase, {"errorType": "EnvironmentDied", "errorMessage": message})


@dataclass(frozen=True)
class InvokeResult:
    """A response (or Lambda's error payload for an unhandled exception) and how long the handler ran."""

    response: Any
    duration_s: float
    error: dict[str, Any] | None = None
    #: The environment's page faults during the invoke: ``{"minor": N, "major": N}`` (empty on an error).
    faults: dict[str, int] = field(default_factory=dict)


class RestoredEnvironment(Closing):
    """One execution environment restored from the snapshot; invoke it as many times as you like."""

    def __init__(self, conn: Connection, restore_s: float, pid: int) -> None:
        self._conn = conn
        self.restore_s = restore_s
        self.pid = pid

    def invoke(self, event: Any, *, client_context: dict[str, Any] | None = None) -> InvokeResult:
        """Invoke the handler with ``event``; ``client_context`` becomes ``context.client_context.custom``."""
        return self.invoke_json(json.dumps(event), client_context=client_context)

    def invoke_json(
        self, payload: str | bytes, *, client_context: dict[str, Any] | None = None
    ) -> InvokeResult:
        """Invoke with the JSON text ``payload``: the environment decodes it, as Lambda's runtime does, and
        answers ``Runtime.UnmarshalError`` if it cannot; :class:`LocalFunctionError` if it died."""
        try:
            self._conn.send(("invoke", (payload, client_context)))
            reply = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise LocalFunctionError.died("invoke", f"environment {self.pid} exited: {exc}") from exc
        return InvokeResult(
            reply.get("response"), reply["duration_s"], reply.get("error"), reply.get("faults") or {}
        )

    def close(self) -> None:
        _exit(self._conn)


class LocalFunction(Closing):
    """Drives a host process (``snapllm_dev.local.host``) through the Lambda lifecycle."""

    def __init__(
        self,
        spec: Function,
        *,
        local: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """``local`` and ``overrides`` complete the template's variables (see
        :func:`~snapllm_dev.local.environment.function_environment`, which raises for a value left
        unresolved)."""
        self.spec = spec
        self.timeout_s = timeout_s or spec.timeout_s
        self._environment = function_environment(spec, local=local, overrides=overrides)
        self._tmp = tempfile.TemporaryDirectory(prefix="snapllm-local-")
        self._address = str(Path(self._tmp.name) / "lifecycle.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._address)
        self._listener.listen()
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    @property
    def environment(self) -> dict[str, str]:
        """The function's variables: the template's values, overridden by the local ones."""
        return dict(self._environment)

    def init(self) -> dict[str, Any]:
        """Start a fresh interpreter and import the handler module: the init phase."""
        env = {
            **os.environ,
            **self._environment,
            "AWS_LAMBDA_FUNCTION_NAME": self.spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "1",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start" if self.spec.snapstart else "on-demand",
        }
        self._process = subprocess.Popen(
            [sys.executable, "-m", "snapllm_dev.local.host", self._address],
            env=env,
            stdout=sys.stderr.fileno(),
        )
        self._conn = self._accept("init")
        return self._call(
            "init",
            code_dir=str(self.spec.code_dir),
            module=self.spec.module_name,
            function=self.spec.function_name,
        )

    def _accept(self, phase: str, timeout_s: float = 60.0) -> Connection:
        """Wait for the host (or a restored child) to connect, failing fast if the host has died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._listener], [], [], 0.1)
            if ready:
                sock, _ = self._listener.accept()
                return Connection(sock.detach())
            if self._process is not None and self._process.poll() is not None:
                break
        raise self._died(phase)

    def _died(self, phase: str) -> LocalFunctionError:
        code = self._process.poll() if self._process is not None else None
        return LocalFunctionError.died(phase, f"the function process exited (code {code})")

    def _call(self, phase: str, **payload: Any) -> Any:
        assert self._conn is not None, "call init() first"
        try:
            self._conn.send((phase, payload))
            reply = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise self._died(phase) from exc
        if "error" in reply:
            raise LocalFunctionError(phase, reply["error"])
        return reply["result"]

    def snapshot(self) -> dict[str, Any]:
        """Run the before-snapshot hooks (in reverse registration order, as Lambda does)."""
        return self._call("snapshot")

    def restore(self, *, timeout_s: float | None = None) -> RestoredEnvironment:
        """Fork the snapshotted process into a new environment and run its after-restore hooks (``timeout_s``:
        this environment's invoke timeout, default the function's)."""
        pid = self._call(
            "restore",
            function_name=self.spec.name,
            timeout_s=timeout_s or self.timeout_s,
            memory_mb=self.spec.memory_mb,
        )
        conn = self._accept("restore")
        reply = conn.recv()
        if "error" in reply:
            conn.close()
            raise LocalFunctionError("restore", reply["error"])
        return RestoredEnvironment(conn, reply["restore_s"], pid)

    def close(self) -> None:
        if self._conn is not None:
            _exit(self._conn)
            self._conn = None
        if self._process is not None:
            # The host was asked to exit above; it gets the usual time before it is killed.
            stop_process(self._process, terminate=False)
            self._process = None
        self._listener.close()
        self._tmp.cleanup()


def _exit(conn: Connection) -> None:
    with contextlib.suppress(OSError):
        conn.send(("exit", None))
    conn.close()
