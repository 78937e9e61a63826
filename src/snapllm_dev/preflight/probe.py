"""What a running Lambda container sees: run inside it (standard library only), prints one JSON object.

    docker exec -i CONTAINER /var/lang/bin/python3.13 - < src/snapllm_dev/preflight/probe.py

It reports the runtime process's search path (through an interpreter started with that process's
environment and working directory) and, per top-level module, where it is imported from and every copy
on the path. It imports nothing of the function. ``preflight.container.ContainerView`` reads it.
"""

import json
import os
import subprocess
import sys

#: The runtime's process: SAM's emulator starts /var/runtime/bootstrap, which runs the interface client.
RUNTIME_MARKERS = ("awslambdaric", "bootstrap.py", "/var/runtime/bootstrap")
#: Where the function's own code, the layers and the runtime's packages live in a Lambda container.
PROVIDERS = ("/var/task", "/opt/python", "/var/runtime")

INNER = r"""
import importlib.util, json, os, sys

def names(directory):
    found = set()
    try:
        entries = os.listdir(directory)
    except OSError:
        return found
    for entry in entries:
        path = os.path.join(directory, entry)
        if os.path.isdir(path):
            name = entry
        elif entry.endswith(".py"):
            name = entry[:-3]
        elif ".cpython-" in entry and entry.endswith(".so"):
            name = entry.split(".", 1)[0]
        else:
            continue
        # Only importable names: not numpy.libs, *.dist-info, __pycache__ or private helpers.
        if name.isidentifier() and not name.startswith("_"):
            found.add(name)
    return found

# The runtime runs `python -m awslambdaric`, whose first path entry is its working directory; `-c` (this
# interpreter) would put "" there instead.
if sys.path and sys.path[0] == "":
    sys.path[0] = os.getcwd()
providers = json.loads(sys.argv[1])
on_path = [p for p in sys.path if p and any(p == d or p.startswith(d + "/") for d in providers)]
modules = {}
for name in sorted(set().union(*(names(p) for p in on_path))):
    candidates = [
        os.path.join(p, name) if os.path.isdir(os.path.join(p, name)) else os.path.join(p, name + ".py")
        for p in on_path if name in names(p)
    ]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = None
    if spec is not None and spec.has_location:
        origin = spec.origin
    elif spec is not None:
        origin = next(iter(spec.submodule_search_locations or []), None)
    modules[name] = {"origin": origin, "candidates": candidates}
print(json.dumps({"sys_path": sys.path, "modules": modules}))
"""


def runtime_process() -> int | None:
    """The pid of the runtime interface client, the process that runs the handler."""
    for entry in sorted(os.listdir("/proc"), key=lambda e: (len(e), e)):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if any("python" in a for a in text[:1]) and any(m in a for a in text for m in RUNTIME_MARKERS):
            return int(entry)
    return None


def main() -> int:
    pid = runtime_process()
    if pid is None:
        print(json.dumps({"error": "no runtime process (python -m awslambdaric) runs in this container"}))
        return 1
    with open(f"/proc/{pid}/environ", "rb") as handle:
        pairs = [item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item]
    environment = {key.decode(): value.decode(errors="replace") for key, value in pairs}
    cwd = os.readlink(f"/proc/{pid}/cwd")
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
    inner = subprocess.run(
        [argv[0], "-c", INNER, json.dumps(PROVIDERS)],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if inner.returncode != 0:
        print(json.dumps({"error": f"the runtime's interpreter failed: {inner.stderr[-2000:]}"}))
        return 1
    view = json.loads(inner.stdout)
    view.update(
        runtime={"pid": pid, "cwd": cwd, "argv": argv, "handler": environment.get("_HANDLER")},
        environment=environment,
        opt_python=os.path.isdir("/opt/python"),
    )
    print(json.dumps(view))
    return 0


if __name__ == "__main__":
    sys.exit(main())
