"""The Docker engine calls `make sam-local` makes beside SAM's own (the engine's socket is ``DOCKER_HOST``).

gateway = bridge_gateway()                        # "172.17.0.1": this machine, seen from a container
for container in sam_containers("InferenceFunction"):
    view = exec_python(container, PROBE)          # runs a script inside SAM's running container
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

from snapllm.errors import SnapllmError

#: The label SAM puts on each function container, with the function's logical ID.
FUNCTION_LABEL = "sam.cli.function.name"
#: The interpreter of the Lambda python3.13 image.
PYTHON = "/var/lang/bin/python3.13"


class DockerError(SnapllmError):
    """A docker command failed (is DOCKER_HOST set to the engine `scripts/docker-daemon.sh` started?)."""


def docker(*args: str, stdin: str | None = None, timeout_s: float = 120, stderr: bool = False) -> str:
    """``docker ARGS``: its stdout (with its stderr after it, with ``stderr``), or DockerError."""
    try:
        done = subprocess.run(
            ["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DockerError(f"docker {args[0]}: {exc}") from exc
    if done.returncode != 0:
        raise DockerError(f"docker {' '.join(args[:2])} exited with {done.returncode}: {done.stderr.strip()}")
    return done.stdout + (done.stderr if stderr else "")


def require_engine() -> str:
    """The Docker engine's version, or a DockerError in one line when there is no engine to talk to."""
    try:
        return docker("version", "--format", "{{.Server.Version}}", timeout_s=30).strip()
    except DockerError as exc:
        reason = " ".join(str(exc).split())[-300:]
        raise DockerError(
            f"no Docker engine ({reason}); `make sam-local` starts one and sets DOCKER_HOST"
        ) from None


def bridge_gateway() -> str:
    """The address of this machine on Docker's default bridge, where containers reach its servers.

    An engine that created its ``docker0`` itself (its first start on a machine) records the bridge's
    subnet but no gateway; the bridge driver then gives ``docker0`` the subnet's first address, which is
    the one used here."""
    answer = docker("network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}").strip()
    try:
        configs = json.loads(answer) or []
        config = next(c for c in configs if ipaddress.ip_network(c["Subnet"]).version == 4)
    except (ValueError, KeyError, TypeError, StopIteration) as exc:
        raise DockerError(f"Docker's bridge network has no IPv4 subnet: {answer!r}") from exc
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def sam_containers(function: str) -> list[str]:
    """Running containers SAM started for ``function`` (its logical ID), newest first."""
    return docker("ps", "--quiet", "--filter", f"label={FUNCTION_LABEL}={function}").split()


def remove_sam_containers() -> list[str]:
    """Removes every function container SAM left behind (an interrupted run); returns their ids."""
    found = docker("ps", "--all", "--quiet", "--filter", f"label={FUNCTION_LABEL}").split()
    if found:
        docker("rm", "--force", *found)
    return found


def exec_python(container: str, script: Path, *, timeout_s: float = 120) -> Any:
    """Runs ``script`` with the image's Python inside ``container``; its stdout, decoded as JSON."""
    output = docker(
        "exec", "--interactive", container, PYTHON, "-", stdin=script.read_text(), timeout_s=timeout_s
    )
    try:
        return json.loads(output)
    except ValueError as exc:
        raise DockerError(f"{script.name} in {container[:12]} printed no JSON: {output[-500:]!r}") from exc
