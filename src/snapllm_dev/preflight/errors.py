"""Exceptions raised by the preflight check.

Example:
    >>> from snapllm_dev.preflight.errors import PreflightError
    >>> issubclass(BuildDirError, PreflightError)
    True
"""

from __future__ import annotations

from snapllm.errors import SnapllmError


class PreflightError(SnapllmError):
    """Base class: the check could not run (as opposed to a rule that found a problem)."""


class BuildDirError(PreflightError):
    """The build directory or its template is missing or unreadable."""


class TemplateError(PreflightError):
    """The built template is not valid YAML or lacks what the check needs."""


class ElfError(PreflightError):
    """A file that starts like an ELF file could not be parsed as one."""


class ProbeError(PreflightError):
    """The container probe could not look inside a function's container (no runtime process there, or its
    interpreter failed)."""
