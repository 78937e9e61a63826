"""The ``snapllm`` command as a user runs it: a subprocess in the repository, generating on one thread with no
declared prompt prefixes; or ``main(argv)`` in the test's own process, as that process would run it
(:func:`run_main`)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from snapllm_dev.cli import main
from tests.support.generation import NO_PROMPT_PREFIXES, TEST_THREADS
from tests.support.paths import REPO
from tests.support.procfs import running_descendants

#: What Python's last-resort handler prints of a record logged with no handler of its own.
_LAST_RESORT = logging.Formatter()

ENV = {**os.environ, "SNAPLLM_THREADS": TEST_THREADS, **NO_PROMPT_PREFIXES}
#: ``snapllm local invoke`` of the completion event on the tests' model, for the tests of the command itself
#: (its faults, its arguments) rather than of the default model's answers.
INVOKE_COMPLETION = (
    *("local", "invoke", "InferenceFunction", "-e", "events/inference/completion.json"),
    *("--model", "smollm2-135m"),
)
#: The threads that the first model load or schema in a process starts for the life of the process (the
#: grammar and schema compile threads): a command run in-process that starts one has left nothing behind.
PROCESS_THREADS = ("grammar-compile", "schema-compile")


def snapllm(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``snapllm ARGS`` in the repository, with ``env`` over :data:`ENV`."""
    return subprocess.run(
        [sys.executable, "-m", "snapllm_dev.cli", *args],
        cwd=REPO,
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class InProcessRun:
    """What ``main(argv)`` did in this process: its exit code, its output, how long it took, and what it left
    running (each named; they are killed, not to be left to the next test)."""

    code: int
    stdout: str
    stderr: str
    seconds: float
    leftovers: tuple[str, ...]


def run_main(
    argv: Sequence[str],
    capfd: pytest.CaptureFixture[str],
    *,
    env: Mapping[str, str],
    only_env: bool = False,
    caplog: pytest.LogCaptureFixture | None = None,
) -> InProcessRun:
    """``snapllm ARGV`` through ``main(argv)`` in this process, as its own process would run it: in the
    repository, with ``env`` over the environment (``only_env``: as the whole environment), its exit and an
    uncaught exception as the interpreter makes them.

    The output is read at the file descriptors, where the command's child processes write too; with
    ``caplog``, the warnings logged in this process (which pytest takes) are added to ``stderr`` as Python's
    last-resort handler would print them there."""
    children, threads = running_descendants(os.getpid()), set(threading.enumerate())
    handlers, sigterm = list(logging.getLogger().handlers), signal.getsignal(signal.SIGTERM)
    capfd.readouterr()
    if caplog is not None:
        caplog.clear()
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(env) if only_env else ():
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.chdir(REPO)
        try:
            code = main(list(argv))
        except SystemExit as exit:  # what the interpreter would make of it
            code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
            if not isinstance(exit.code, int | None):
                print(exit.code, file=sys.stderr)
        except Exception:  # the process would print it and exit 1
            traceback.print_exc()
            code = 1
        finally:
            signal.signal(signal.SIGTERM, sigterm)  # main() installs the command's own handler
            logging.getLogger().handlers[:] = handlers
    seconds = time.monotonic() - started

    def running() -> tuple[set[int], list[str]]:
        started = set(threading.enumerate()) - threads
        names = [t.name for t in started if t.is_alive() and not t.name.startswith(PROCESS_THREADS)]
        return running_descendants(os.getpid()) - children, names

    deadline = time.monotonic() + 1  # what the command stopped on its way out is gone within a moment
    left, names = running()
    while (left or names) and time.monotonic() < deadline:
        time.sleep(0.05)
        left, names = running()
    leftovers = [f"process {pid}" for pid in sorted(left)] + [f"thread {name}" for name in names]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    out, err = capfd.readouterr()
    if caplog is not None:
        logged = [record for record in caplog.records if record.levelno >= logging.WARNING]
        err += "".join(_LAST_RESORT.format(record) + "\n" for record in logged)
    return InProcessRun(code, out, err, seconds, tuple(leftovers))
