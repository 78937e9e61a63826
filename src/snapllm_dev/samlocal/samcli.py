"""The SAM CLI commands `make sam-local` runs, each a thin named call, and what their output says.

    sam = SamCli(Path(".tools/bin/sam"), template=overlay, env_vars=env_file, container_host="172.17.0.1")
    run = sam.invoke("InferenceFunction", Path("events/inference/chat.json"))
    run.response, run.report.init_ms, run.report.duration_ms

Every call runs the real ``sam`` with ``--skip-pull-image`` (the base image is the local stand-in where the
official one cannot be pulled). stdout holds the function's response; the Runtime Interface Emulator's
``REPORT`` line on stderr holds the container's timings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snapllm.errors import SnapllmError
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.s3 import LOCAL_CREDENTIALS

# REPORT RequestId: 7e0c...\tInit Duration: 0.04 ms\tDuration: 2449.02 ms\tBilled Duration: 2450 ms\t
# Memory Size: 10240 MB\tMax Memory Used: 10240 MB  (SAM's emulator: its Init Duration is not the runtime's)
_REPORT_FIELD = re.compile(
    r"(?:^|\t)(Init Duration|Duration|Billed Duration|Memory Size|Max Memory Used): ([\d.]+)"
)
# "Durable execution started\n=========================\nARN: 071de172-.../0e900224-..."
_EXECUTION_ARN = re.compile(r"Durable execution started\s*=+\s*ARN:\s*(\S+)")


def remove_orphaned_build_locks(directory: Path | None = None) -> list[Path]:
    """Remove SAM's image-build locks (``samcli_*.building.lock``, temp directory) whose process is gone.

    ``sam local`` takes such a lock while it builds a function's image, and a SAM killed mid-build leaves it
    behind: the next run then waits five minutes for a build nobody is doing. A lock names its process.
    """
    removed = []
    for lock in Path(directory or tempfile.gettempdir()).glob("samcli_*.building.lock"):
        try:
            pid = int(lock.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if _process_exists(pid):
            continue
        for stale in (lock, lock.with_suffix(".status")):
            stale.unlink(missing_ok=True)
        removed.append(lock)
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SamCliError(SnapllmError):
    """A SAM CLI command failed; the message ends with what it printed."""

    def __init__(self, command: Sequence[str], returncode: int | None, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"'{' '.join(command[:4])} ...' exited with {returncode}:\n{tail}")


@dataclass(frozen=True)
class Report:
    """A container's times: the emulator's ``REPORT`` Duration (SAM's emulator starts the runtime on the
    first invoke, so it holds the init too) and the function's own init, where it logs one (the inference
    runtime's ``model ready`` line: download, load and the whole module init)."""

    duration_ms: float | None = None
    memory_mb: float | None = None
    init_phases_s: Mapping[str, float] | None = None

    @classmethod
    def parse(cls, text: str) -> Report:
        """The last ``REPORT`` line and the last logged ``phases`` in ``text`` (SAM's stderr)."""
        lines = [line for line in text.splitlines() if "REPORT RequestId" in line]
        fields = dict(_REPORT_FIELD.findall(lines[-1])) if lines else {}
        return cls(
            duration_ms=float(fields["Duration"]) if "Duration" in fields else None,
            memory_mb=float(fields["Memory Size"]) if "Memory Size" in fields else None,
            init_phases_s=_logged_phases(text),
        )


def _logged_phases(text: str) -> Mapping[str, float] | None:
    for line in reversed(text.splitlines()):
        if '"phases"' not in line:
            continue
        try:
            phases = json.loads(line).get("phases")
        except (ValueError, AttributeError):
            continue
        if isinstance(phases, dict):
            return {k: float(v) for k, v in phases.items() if isinstance(v, int | float)}
    return None


@dataclass(frozen=True)
class Invocation:
    """One ``sam local invoke``: the function's response, the REPORT line, and the command's wall time."""

    function: str
    event: Path
    response: Any
    report: Report
    wall_s: float
    stderr: str


@dataclass
class RunningInvoke:
    """A ``sam local invoke`` under way; its stderr is kept in a file, so it can be read while it runs."""

    function: str
    event: Path
    process: subprocess.Popen[str]
    stderr: IO[str]
    started: float

    def stderr_so_far(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    @property
    def execution_arn(self) -> str | None:
        """A durable run's execution ARN, once SAM has printed it."""
        found = _EXECUTION_ARN.findall(self.stderr_so_far())
        return found[0] if found else None

    def stop(self) -> None:
        """Ends the command (SAM stops its container on the way out)."""
        stop_process(self.process)
        self.stderr.close()

    def finish(self, *, timeout_s: float = 600) -> Invocation:
        """Waits for the command and reads the function's response from its stdout."""
        try:
            stdout, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            stdout, _ = self.process.communicate()
            raise SamCliError(
                self.process.args, None, f"timed out after {timeout_s:g} s\n{self.stderr_so_far()}"
            ) from None
        finally:
            stderr = self.stderr_so_far()
            self.stderr.close()
        if self.process.returncode != 0:
            raise SamCliError(self.process.args, self.process.returncode, stderr + stdout)
        return Invocation(
            self.function,
            self.event,
            _response(stdout),
            Report.parse(stderr),
            time.monotonic() - self.started,
            stderr,
        )


@dataclass(frozen=True)
class SamCli:
    """Runs ``sam local`` commands against ``template`` (the overlay of the build) with ``env_vars``."""

    sam: Path
    template: Path
    env_vars: Path
    container_host: str
    parameter_overrides: Mapping[str, str] | None = None
    environment: Mapping[str, str] | None = None

    def _common(self) -> list[str]:
        overrides = [f"{key}={value}" for key, value in (self.parameter_overrides or {}).items()]
        return [
            "--template",
            str(self.template),
            "--env-vars",
            str(self.env_vars),
            "--skip-pull-image",
            *(["--parameter-overrides", " ".join(overrides)] if overrides else []),
        ]

    def _env(self) -> dict[str, str]:
        return {**os.environ, **LOCAL_CREDENTIALS, "SAM_CLI_TELEMETRY": "0", **(self.environment or {})}

    def invoke_command(self, function: str, event: Path) -> list[str]:
        """The exact ``sam local invoke`` this runs, for a person to repeat."""
        return [str(self.sam), "local", "invoke", function, "--event", str(event), *self._common()]

    def invoke(self, function: str, event: Path, *, timeout_s: float = 600) -> Invocation:
        """``sam local invoke FUNCTION --event EVENT``: a new container, init, one invoke."""
        return self.start_invoke(function, event).finish(timeout_s=timeout_s)

    def start_invoke(self, function: str, event: Path) -> RunningInvoke:
        """Starts ``sam local invoke`` and returns at once (a durable run waits for its approval)."""
        # Closed by RunningInvoke.finish or stop: the invoke outlives this call.
        stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        process = subprocess.Popen(
            self.invoke_command(function, event),
            env=self._env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        return RunningInvoke(function, event, process, stderr, time.monotonic())

    def start_lambda(self, *, host: str, port: int, log: Path) -> subprocess.Popen[bytes]:
        """``sam local start-lambda``: the Lambda Invoke API on ``host:port`` serving the template's
        functions, each in a container kept warm after its first invoke."""
        with log.open("wb") as sink:
            return subprocess.Popen(
                [
                    str(self.sam),
                    "local",
                    "start-lambda",
                    "--host",
                    host,
                    "--port",
                    str(port),
                    "--warm-containers",
                    "LAZY",
                    *self._common(),
                ],
                env=self._env(),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def execution_history(self, execution_arn: str) -> dict[str, Any]:
        """``sam local execution history ARN --format json``."""
        output = self._run(["local", "execution", "history", execution_arn, "--format", "json"])
        return json.loads(output[output.index("{") :])

    def execution_get(self, execution_arn: str) -> dict[str, Any]:
        """``sam local execution get ARN --format json``: status, result or error of a durable run."""
        output = self._run(["local", "execution", "get", execution_arn, "--format", "json"])
        return json.loads(output[output.index("{") :])

    def callback_succeed(self, callback_id: str, result: Mapping[str, Any]) -> str:
        """``sam local callback succeed ID --result JSON``: answers a durable run's callback."""
        return self._run(["local", "callback", "succeed", callback_id, "--result", json.dumps(result)])

    def _run(self, args: list[str], *, timeout_s: float = 120) -> str:
        command = [str(self.sam), *args]
        done = subprocess.run(
            command, env=self._env(), capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if done.returncode != 0:
            raise SamCliError(command, done.returncode, done.stderr + done.stdout)
        return done.stdout


def _response(stdout: str) -> Any:
    """The function's response: the last line of stdout that parses as JSON (SAM may print notices)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    try:
        return json.loads(stdout)
    except ValueError:
        return stdout.strip()
