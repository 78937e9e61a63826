"""Named phase timings of one process, in the order they happened.

The inference runtime records its init phases here; the local runner and the benchmarks read them::

    with phases.measure("model_load"):
        engine = Engine.load(...)
    phases.as_dict()  # {"model_load": 0.151, ...}
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class PhaseLog:
    """Seconds per named phase; measuring a name again replaces it."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.record(name, time.perf_counter() - started)

    def record(self, name: str, seconds: float) -> None:
        self._seconds.pop(name, None)
        self._seconds[name] = seconds

    def get(self, name: str) -> float | None:
        return self._seconds.get(name)

    def as_dict(self) -> dict[str, float]:
        return dict(self._seconds)


phases = PhaseLog()
"""The process-wide log that the inference runtime records into."""
