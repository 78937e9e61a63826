"""The variables a function runs with on this machine: the one place the caller's shell overrides a template.

Sources, lowest precedence first: 1. the template's values (:mod:`snapllm_dev.sam`); 2. ``local``
stand-ins for what only a deployment knows; 3. the caller's ``SNAPLLM_*`` and ``POWERTOOLS_*`` variables;
4. ``overrides`` (``--env`` and the runner's wiring). A value left :class:`~snapllm_dev.sam.Unresolved`
must come from 2-4 or be named in ``wired``; ``function`` None gives 2-4 alone. docs/testing.md has more.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from snapllm.errors import ConfigurationError
from snapllm_dev.sam import Function, Unresolved, scalar_text

#: Prefixes of the caller's variables that override a template's values.
SHELL_OVERRIDE_PREFIXES = ("SNAPLLM_", "POWERTOOLS_")

# strtobool's words, which Powertools parses its switches with (anything else raises at the Logger's,
# Metrics' or Tracer's construction).
_TRUTH_WORDS = frozenset({"y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0"})


def _is_rate(text: str) -> bool:
    try:
        return math.isfinite(rate := float(text)) and 0 <= rate <= 1
    except ValueError:
        return False


#: Variables read outside the settings classes (by Powertools, or the local host's logging) whose bad value
#: would fail a function only once it builds its Logger, Metrics or Tracer: what each must be.
STRICT_VARIABLES: dict[str, tuple[Callable[[str], bool], str]] = {
    **{
        name: (lambda text: text.upper() in logging.getLevelNamesMapping(), "a log level (DEBUG, INFO, ...)")
        for name in ("POWERTOOLS_LOG_LEVEL", "SNAPLLM_LOG_LEVEL")
    },
    "POWERTOOLS_LOGGER_SAMPLE_RATE": (_is_rate, "a number from 0 to 1"),
    **{
        name: (lambda text: text.lower() in _TRUTH_WORDS, "true or false")
        for name in ("POWERTOOLS_DEV", "POWERTOOLS_METRICS_DISABLED", "POWERTOOLS_TRACE_DISABLED")
    },
}


def check_strict_variables(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a bad value of :data:`STRICT_VARIABLES` in ``environ`` (default: the caller's) before anything
    starts; blank values are unset.

    Raises:
        ConfigurationError: Naming each variable, what it must be and what it was.
    """
    environ = os.environ if environ is None else environ
    problems = [
        f"{name} must be {what}, got {value!r}"
        for name, (valid, what) in STRICT_VARIABLES.items()
        if (value := environ.get(name, "").strip()) and not valid(value)
    ]
    if problems:
        raise ConfigurationError("; ".join(problems))


def function_environment(
    function: Function | None,
    *,
    local: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    wired: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables ``function`` runs with locally (see the module's docstring for the order).

    Raises:
        ConfigurationError: A template value is unresolved and nothing supplies it; the message names it.
    """
    environ = os.environ if environ is None else environ
    merged: dict[str, Any] = {
        **(function.environment if function is not None else {}),
        **(local or {}),
        **{k: v for k, v in environ.items() if k.startswith(SHELL_OVERRIDE_PREFIXES)},
        **(overrides or {}),
    }
    missing = sorted(k for k, v in merged.items() if isinstance(v, Unresolved) and k not in wired)
    if function is not None and missing:
        raise ConfigurationError(f"{function.name}: give local values for {', '.join(missing)}")
    known = {k: v for k, v in merged.items() if not isinstance(v, Unresolved)}
    return {k: "" if v is None else scalar_text(v) for k, v in known.items()}
