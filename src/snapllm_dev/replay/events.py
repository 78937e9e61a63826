"""Which events a replay runs, which function answers each, and where its expectation is recorded.

    manifest = Manifest.load(Path("events"))
    for event in manifest.events([Path("events/router")]):
        event.function, event.path, event.expected_path, event.approval

docs/testing.md ("Replay events") says what the manifest, ``events/replay.toml``, holds.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from snapllm.errors import SnapllmError

MANIFEST_NAME = "replay.toml"
EXPECTED_SUFFIX = ".expected.json"
# The variables a manifest's [settings] may pin: the functions' own.
SETTING_PREFIX = "SNAPLLM_"


class ReplaySetupError(SnapllmError):
    """The manifest or a named event cannot be used: the message says which and why."""


class ReplayDeadlineError(SnapllmError):
    """The event's function ran out of time on this machine before it answered: the message says where."""


class Approval(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


@dataclass(frozen=True)
class ReplayEvent:
    path: Path
    name: str  # the path relative to the events folder, e.g. "router/chat.json"
    function: str
    approval: Approval

    @property
    def expected_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".json") + EXPECTED_SUFFIX)


@dataclass(frozen=True)
class Manifest:
    root: Path
    functions: Mapping[str, str]
    approvals: Mapping[str, Approval]
    settings: Mapping[str, str]

    @classmethod
    def load(cls, root: Path) -> Manifest:
        path = root / MANIFEST_NAME
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ReplaySetupError(f"cannot read the replay manifest {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ReplaySetupError(f"{path} is not valid TOML: {exc}") from None
        functions = data.get("functions")
        if not isinstance(functions, dict) or not all(isinstance(v, str) for v in functions.values()):
            raise ReplaySetupError(f'{path} needs a [functions] table of folder = "LogicalId"')
        approvals = data.get("approval", {})
        try:
            decided = {str(name): Approval(value) for name, value in approvals.items()}
        except (AttributeError, ValueError):
            raise ReplaySetupError(
                f'{path}: each [approval] entry is "approve" or "reject", got {approvals!r}'
            ) from None
        settings = data.get("settings", {})
        if not isinstance(settings, dict) or not all(
            isinstance(name, str) and name.startswith(SETTING_PREFIX) and isinstance(value, str | int)
            for name, value in settings.items()
        ):
            raise ReplaySetupError(
                f'{path}: [settings] holds {SETTING_PREFIX}NAME = "value" entries, got {settings!r}'
            )
        pinned = {name: str(value) for name, value in settings.items()}
        return cls(root.resolve(), functions, decided, pinned)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """The manifest's settings in this process's environment (which the local functions read), over any
        shell variable of the same name, for the replay's duration."""
        before = {name: os.environ.get(name) for name in self.settings}
        os.environ.update(self.settings)
        try:
            yield
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def events(self, selected: Iterable[Path] = ()) -> list[ReplayEvent]:
        """The events under ``selected`` (files or folders; default: every mapped folder), sorted by name."""
        selected = list(selected) or [
            self.root / folder for folder in self.functions if (self.root / folder).is_dir()
        ]
        found: dict[str, ReplayEvent] = {}
        for item in selected:
            if not item.exists():
                raise ReplaySetupError(f"{item}: no such event file or folder")
            paths = sorted(item.glob("*.json")) if item.is_dir() else [item]
            for path in paths:
                if not path.name.endswith(EXPECTED_SUFFIX):
                    event = self.event(path)
                    found[event.name] = event
        return sorted(found.values(), key=lambda event: event.name)

    def event(self, path: Path) -> ReplayEvent:
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise ReplaySetupError(f"{path} is not under {self.root}, whose {MANIFEST_NAME} maps its folders")
        relative = resolved.relative_to(self.root)
        function = self.functions.get(relative.parts[0]) if len(relative.parts) == 2 else None
        if function is None:
            raise ReplaySetupError(
                f"{path}: its folder is not in {self.root / MANIFEST_NAME}'s [functions] "
                f"({', '.join(sorted(self.functions))})"
            )
        name = relative.as_posix()
        return ReplayEvent(resolved, name, function, self.approvals.get(name, Approval.APPROVE))
