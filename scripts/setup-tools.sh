#!/usr/bin/env bash
# Installs the AWS SAM CLI (and other pinned CLI tools) into .tools, a venv of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=.tools
py=$(scripts/find-python313.sh)
[ -x "$tools/bin/python" ] || "$py" -m venv "$tools"
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements/tools.txt
touch "$tools/.installed"
echo "tools: $("$tools/bin/sam" --version)"
