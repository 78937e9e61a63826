"""Facts about the machine the function runs on.

>>> available_cpus() >= 1
True
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def _cgroup_quota_cpus(cpu_max: Path = _CGROUP_CPU_MAX) -> int | None:
    """CPUs granted by a cgroup v2 quota (``cpu.max`` is ``"<quota> <period>"`` or ``"max <period>"``)."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def available_cpus(cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """CPUs this process may really use: the affinity mask, narrowed by a cgroup CPU quota.

    ``os.cpu_count()`` reports the host's CPUs, which over-subscribes threads inside a container or a
    Lambda sandbox; a thread more than there are CPUs slows llama.cpp's decode down.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota_cpus(cpu_max)
    return min(cpus, quota) if quota else cpus


def function_memory_mb(env: Mapping[str, str] = os.environ) -> int | None:
    """The Lambda function's memory setting, in MB (None outside Lambda)."""
    try:
        return int(env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
    except (KeyError, ValueError):
        return None


def rss_bytes() -> int:
    """Current resident set size of this process (anonymous, file and shared memory pages)."""
    return _status_field("VmRSS")


def peak_rss_bytes() -> int:
    """Highest resident set size of this process so far."""
    return _status_field("VmHWM")


def _status_field(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{name} missing from /proc/self/status")
