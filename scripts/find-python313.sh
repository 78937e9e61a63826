#!/usr/bin/env bash
# Prints the path of a working python3.13 (the Lambda runtime's version): PATH first, then pyenv's installs.
# A pyenv shim on PATH is not enough: it fails unless 3.13 is the active pyenv version, so each candidate is run.
set -u
candidates=()
command -v python3.13 >/dev/null 2>&1 && candidates+=("$(command -v python3.13)")
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for d in "$root"/versions/3.13*/bin/python3.13; do candidates+=("$d"); done
fi
for d in "$HOME"/.pyenv/versions/3.13*/bin/python3.13 /usr/local/bin/python3.13 /usr/bin/python3.13; do
  candidates+=("$d")
done
for c in "${candidates[@]}"; do
  if [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; then
    "$c" -c 'import sys; print(sys.executable)'
    exit 0
  fi
done
echo "python3.13 not found: install it (e.g. 'pyenv install 3.13') and run 'make setup' again" >&2
exit 1
