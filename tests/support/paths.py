"""The repository the tests run in: its root (the working directory of the CLI's subprocesses) and its SAM
template (what the local stack deploys)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"
