"""Lambda Web Adapter, locally: a function's ASGI app under uvicorn, driven through LWA's lifecycle.

    process = WebAdapterProcess.start(template.function("StreamFunction"), environment)
    httpx.post(f"{process.url}/v1/chat/completions", json={..., "stream": True})

The app listens on a unix socket only its owner may reach (``process.transport()``), not on a TCP port;
docs/testing.md ("The local stack") says what is played of LWA's lifecycle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from snapllm.errors import SnapllmError
from snapllm_dev.local.processes import stop_process
from snapllm_dev.sam import Function

READINESS_CHECK_PATH = "AWS_LWA_READINESS_CHECK_PATH"
#: Each phase of a web-adapter function's local start may take this long, and this much more per 100 MB of
#: model (:func:`default_start_timeout_s`); ``--start-timeout`` or this variable sets the limit instead.
START_TIMEOUT_BASE_S = 120.0
START_TIMEOUT_PER_100_MB_S = 30.0
START_TIMEOUT_VARIABLE = "SNAPLLM_LOCAL_START_TIMEOUT_S"
BEFORE_CHECKPOINT_PATH = "AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH"
AFTER_RESTORE_PATH = "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH"


class LocalServeError(SnapllmError):
    """A part of the local stack did not start."""


def default_start_timeout_s(model_bytes: int) -> float:
    """How long each phase of a web-adapter function's start may take (its init, the warm-up of its
    before-checkpoint hook, its after-restore hook) for a model of ``model_bytes``: the warm-up grows with
    the model (about 20 s for a 1 B model on an idle 2-core machine, several times that on a busy one)."""
    return START_TIMEOUT_BASE_S + START_TIMEOUT_PER_100_MB_S * model_bytes / 100e6


def too_slow(name: str, phase: str, timeout_s: float) -> str:
    """The one line that says a phase of ``name``'s start overran its limit, and how to raise it."""
    return (
        f"{name}'s {phase} did not finish within {round(timeout_s, 1):g} s; raise the limit (by default "
        f"{START_TIMEOUT_BASE_S:g} s + {START_TIMEOUT_PER_100_MB_S:g} s per 100 MB of model) with "
        f"--start-timeout SECONDS or {START_TIMEOUT_VARIABLE}"
    )


class WebAdapterProcess:
    """A web-adapter function's ASGI app on a unix socket, after LWA's readiness check and hooks."""

    #: The URL requests name; they reach the app through :meth:`transport`, whatever its host.
    url = "http://web-adapter.local"

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        socket_path: Path,
        function: Function,
        env: Mapping[str, str],
        timeout_s: float,
    ) -> None:
        self.process = process
        self.socket_path = socket_path
        self.function = function
        self._env = env
        self._timeout_s = timeout_s
        # LWA's lifecycle (the readiness check, then the hooks) runs from the process's start, beside whatever
        # the caller starts meanwhile, as LWA runs it on AWS: the init phase is timed from the process's start
        # however long the caller takes to wait for it, and the warm-up runs beside the caller's own work.
        self._stopping = threading.Event()
        # What ended the lifecycle early, raised by wait_ready in the caller's thread.
        self._start_error: Exception | None = None
        self._lifecycle = threading.Thread(
            target=self._run_lifecycle, name=f"lwa-lifecycle-{function.name}", daemon=True
        )
        self._lifecycle.start()

    @classmethod
    def start(
        cls, function: Function, environment: Mapping[str, str], *, timeout_s: float = 120.0
    ) -> WebAdapterProcess:
        """Start ``function``'s app with ``environment`` (its variables, complete) and run LWA's lifecycle."""
        started = cls.launch(function, environment, timeout_s=timeout_s)
        started.wait_ready()
        return started

    @classmethod
    def launch(
        cls, function: Function, environment: Mapping[str, str], *, timeout_s: float = 120.0
    ) -> WebAdapterProcess:
        """Start ``function``'s process and LWA's lifecycle (the readiness check and the hooks), and return at
        once, so the app's init and warm-up run while the caller starts other parts; :meth:`wait_ready` waits
        for their end."""
        # mkdtemp's folder is its owner's alone (0700); uvicorn makes the socket itself writable by all.
        socket_path = Path(tempfile.mkdtemp(prefix="snapllm-lwa-")) / "app.sock"
        env = {
            **os.environ,
            **environment,
            "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_mb),
        }
        env.pop("AWS_LAMBDA_EXEC_WRAPPER", None)  # /opt/bootstrap is LWA's, which exists only on Lambda
        command = [
            sys.executable, "-m", "uvicorn", "--uds", str(socket_path),
            "--no-access-log", "--log-level", "warning", "--app-dir", str(function.code_dir), "app:app",
        ]  # fmt: skip
        process = subprocess.Popen(command, env=env, stdout=sys.stderr.fileno())
        return cls(process, socket_path, function, env, timeout_s)

    def wait_ready(self) -> None:
        """Wait for the end of LWA's lifecycle started by :meth:`launch`: the readiness check, then the
        SnapStart hooks (a LocalServeError names the phase that failed, and the process is stopped)."""
        try:
            self._lifecycle.join()
            if self._start_error is not None:
                raise self._start_error
        except BaseException:
            self.stop()
            raise

    def transport(self) -> httpx.HTTPTransport:
        """A transport to the app's socket, for an :class:`httpx.Client`."""
        return httpx.HTTPTransport(uds=str(self.socket_path))

    def async_transport(self) -> httpx.AsyncHTTPTransport:
        """A transport to the app's socket, for an :class:`httpx.AsyncClient`."""
        return httpx.AsyncHTTPTransport(uds=str(self.socket_path))

    # What LWA does on AWS: wait for the readiness check, then (SnapStart) the before-checkpoint hook, the
    # snapshot, the restore and the after-restore hook. Locally the process is not forked between. Each phase
    # has the start's limit; one that overruns it, or a process that dies in it, is one line.

    def _run_lifecycle(self) -> None:
        self._await_readiness()
        if self._start_error is None and not self._stopping.is_set():
            try:
                self._hooks()
            except Exception as exc:  # any failure of the hooks is the caller's to raise
                self._start_error = exc

    def _await_readiness(self) -> None:
        name, timeout_s = self.function.name, self._timeout_s
        deadline = time.monotonic() + timeout_s
        path = self._env.get(READINESS_CHECK_PATH) or "/"
        with httpx.Client(base_url=self.url, transport=self.transport(), timeout=timeout_s) as client:
            while not self._stopping.is_set():
                if self.process.poll() is not None:
                    self._start_error = LocalServeError(
                        f"{name} exited during init (code {self.process.returncode})"
                    )
                    return
                with contextlib.suppress(httpx.TransportError):
                    if client.get(path).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    self._start_error = LocalServeError(too_slow(name, "init (loading the model)", timeout_s))
                    return
                self._stopping.wait(0.1)
        self._start_error = LocalServeError(f"{name} was stopped during init")

    def _hooks(self) -> None:
        if not self.function.snapstart:
            return
        name, timeout_s = self.function.name, self._timeout_s
        hooks = (
            ("before-checkpoint hook (the warm-up)", self._env.get(BEFORE_CHECKPOINT_PATH)),
            ("after-restore hook", self._env.get(AFTER_RESTORE_PATH)),
        )
        with httpx.Client(base_url=self.url, transport=self.transport(), timeout=timeout_s) as client:
            for phase, path in hooks:
                if not path:
                    continue
                try:
                    response = client.post(path)
                except httpx.TimeoutException:
                    raise LocalServeError(too_slow(name, phase, timeout_s)) from None
                except httpx.TransportError as exc:
                    code = self.process.poll()
                    how = f"exited (code {code})" if code is not None else f"broke the connection ({exc})"
                    raise LocalServeError(f"{name} {how} during its {phase}") from None
                if response.status_code // 100 != 2:
                    raise LocalServeError(f"{name}'s {phase} ({path}) answered {response.status_code}")

    def stop(self) -> None:
        # The process goes first, so a lifecycle step waiting on its answer ends at once.
        self._stopping.set()
        stop_process(self.process)
        if self._lifecycle is not threading.current_thread():
            self._lifecycle.join()
        shutil.rmtree(self.socket_path.parent, ignore_errors=True)
