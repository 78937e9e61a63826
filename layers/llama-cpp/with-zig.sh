#!/usr/bin/env bash
# Runs a command (build.sh) with zig at hand, however SAM was started: from any shell, in a scratch copy of
# this folder. The pinned ziglang (toolchain.txt) is installed once with `pip install --target` into the
# layer build cache ($SNAPLLM_CACHE_DIR, default ~/.cache/snapllm), and the command gets a Python that
# imports it: SNAPLLM_BUILD_PYTHON plus PYTHONPATH, which build.sh uses to run zig and pip.
#
#   usage: with-zig.sh COMMAND [ARG...]
#
# Builds take turns under a lock: SAM starts both architectures' layers at once, and on a first run both
# would download the same llama-cpp-python source into the cache; each compile uses every core anyway.
# This is not part of build.sh on purpose: build.sh's cache key hashes build.sh, and where zig comes from
# does not change what it compiles (the key has zig's version).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}/llama-cpp
mkdir -p "$cache_root"

if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache_root/.build.lock"
  flock -n 9 || {
    echo "with-zig.sh: waiting for the other llama-cpp layer build to finish" >&2
    flock 9
  }
fi

# The Makefile's choice (python3.13 where possible: build.sh's pip installs cp313 wheels, which an older
# pip may refuse to install from an older Python), else any Python with pip, for zig is a native binary that
# the ziglang package only carries. Its real path, not a pyenv shim, which in SAM's scratch directory would
# resolve to another version.
python=
for candidate in "${SNAPLLM_BUILD_PYTHON:-}" python3.13 python3 python; do
  [ -n "$candidate" ] || continue
  if "$candidate" -m pip --version >/dev/null 2>&1; then
    python=$("$candidate" -c 'import sys; print(sys.executable)')
    break
  fi
done
if [ -z "$python" ]; then
  echo "with-zig.sh: no Python 3 with pip on PATH (needed to install zig from PyPI)" >&2
  exit 1
fi

pins=$(grep -Ev '^[[:space:]]*(#|$)' "$here/toolchain.txt")
zig_dir=$cache_root/toolchain-$(printf '%s\n' "$pins" | sha256sum | cut -c1-12)
if [ ! -f "$zig_dir/.complete" ]; then
  echo "with-zig.sh: installing $(echo "$pins" | tr '\n' ' ')into $zig_dir" >&2
  rm -rf "$zig_dir"
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$zig_dir" -r "$here/toolchain.txt"
  touch "$zig_dir/.complete"
fi

export SNAPLLM_BUILD_PYTHON=$python
export PYTHONPATH="$zig_dir${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import ziglang' || {
  echo "with-zig.sh: $python cannot import ziglang from $zig_dir" >&2
  exit 1
}
exec "$@"
