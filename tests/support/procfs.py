"""What ``/proc`` tells of the processes a test started: their descendants, command lines and the TCP
ports they listen on."""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # the state of a listening socket in /proc/net/tcp


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running_descendants(pid: int) -> set[int]:
    """:func:`descendants` that still run (a zombie has exited, and only waits to be reaped)."""
    running = set()
    for child in descendants(pid):
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(child)
    return running


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports (IPv4 or IPv6) that sockets open in ``pid`` listen on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == _LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
