#!/usr/bin/env bash
# Compiles llama.cpp's own `llama-server` from the sources vendored in the llama-cpp-python release that
# pyproject.toml pins, once per machine, for `snapllm bench grammar --peer llama-server`: the peer then runs
# the same llama.cpp as the engine, with the same CPU kernels (layers/llama-cpp/cpu-flags.sh) and no OpenMP.
# Prints the binary's path. About 10-15 minutes on 2 cores the first time. With --if-built, only prints the
# path of one already built (exit 3 when there is none: nothing is compiled).
set -euo pipefail
cd "$(dirname "$0")/.."
source layers/llama-cpp/cpu-flags.sh
llama_version=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
cpu=$(cpu_flags "$(uname -m)" | tr '\n' ' ') || cpu=
# Static: one binary that needs none of the wheel's shared libraries. No curl: models come from local files.
flags="$cpu-DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF"
cache=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}
target=$cache/llama-server-$llama_version-$(printf '%s' "$flags" | sha256sum | cut -c1-12)
if [ -x "$target/llama-server" ]; then
  echo "$target/llama-server"
  exit 0
fi
if [ "${1:-}" = --if-built ]; then
  exit 3
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=${PYTHON:-$(scripts/find-python313.sh)}
echo "llama-server: compiling llama.cpp from llama-cpp-python $llama_version's sources (once per machine)" >&2
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python -d "$work" \
  "llama-cpp-python==$llama_version" >&2
tar -xzf "$work"/*.tar.gz -C "$work"
src=$(echo "$work"/llama*cpp*python-"$llama_version"/vendor/llama.cpp)
# shellcheck disable=SC2086 # the flags are separate words
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $flags >&2
cmake --build "$work/build" --target llama-server --parallel "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" >&2
mkdir -p "$target.partial"
cp "$work/build/bin/llama-server" "$target.partial/"
rm -rf "$target"
mv "$target.partial" "$target"
echo "$target/llama-server"
