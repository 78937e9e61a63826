"""Value types for the ``snapllm`` subcommands' arguments: a bad value ends in argparse's usage error.

    parser.add_argument("--requests", type=integer(1, 1_000_000))

Imports nothing heavy: the parsers that use it are built on every ``snapllm`` call, ``--help`` included
(docs/cli.md, "How the parser stays fast").
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

#: The first four bytes of every GGUF file.
GGUF_MAGIC = b"GGUF"
#: The highest TCP port.
MAX_PORT = 65535


def _named(func: Callable[[str], object], name: str) -> Callable[[str], object]:
    # argparse names a type's function in its "invalid <name> value" message.
    func.__name__ = name
    return func


def integer(minimum: int, maximum: int) -> Callable[[str], int]:
    """A whole number within ``minimum``-``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be within {minimum}-{maximum}, got {text!r}")
        return value

    return _named(parse, "integer")  # type: ignore[return-value]


def integers(minimum: int, maximum: int) -> Callable[[str], list[int]]:
    """A comma-separated list of whole numbers within ``minimum``-``maximum``, each once, in order given."""
    single = integer(minimum, maximum)

    def parse(text: str) -> list[int]:
        values = [single(part) for part in text.split(",")]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"lists a number twice: {text!r}")
        return values

    return _named(parse, "integers")  # type: ignore[return-value]


def number(minimum: float, maximum: float, *, above_minimum: bool = False) -> Callable[[str], float]:
    """A finite number within ``minimum``-``maximum`` (strictly above ``minimum`` with ``above_minimum``)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        low_ok = value > minimum if above_minimum else value >= minimum
        if not (low_ok and value <= maximum):
            low = f"above {minimum:g}" if above_minimum else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {low} and at most {maximum:g}, got {text!r}")
        return value

    return _named(parse, "number")  # type: ignore[return-value]


def port_number(text: str) -> int:
    """A TCP port, 1-65535; ValueError (naming nothing) otherwise, for callers that add the name."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"must be a port number (1-{MAX_PORT}), got {text!r}") from None
    if not 1 <= value <= MAX_PORT:
        raise ValueError(f"must be a port number (1-{MAX_PORT}), got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port to listen on, 1-65535."""
    try:
        return port_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` with neither side empty."""
    name, sep, value = text.partition("=")
    if not (sep and name.strip() and value.strip()):
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def parameter(text: str) -> tuple[str, str]:
    """A template parameter, ``NAME=VALUE``, as ``sam deploy --parameter-overrides`` takes it (the value may
    be empty)."""
    name, sep, value = text.partition("=")
    if not (sep and name.strip()):
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE, got {text!r}")
    return name.strip(), value


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host."""
    try:
        parts = urlsplit(text.strip())
        valid = parts.scheme in {"http", "https"} and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    except ValueError:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL with a host, got {text!r}")
    return text.strip()


def named_url(text: str) -> tuple[str, str]:
    """``NAME=URL``: a name and an http(s) URL."""
    name, url = pair(text)
    return name, http_url(url)


def readable_file(text: str) -> Path:
    """A path to a file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file" if path.exists() else f"no file {text!r}")
    return path


def gguf_file(text: str) -> Path:
    """A path to a GGUF file (checked by its first four bytes, so a wrong file fails here, not at load)."""
    path = readable_file(text)
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        what = "is empty" if not magic else "is not a GGUF file (it does not start with 'GGUF')"
        raise argparse.ArgumentTypeError(f"{text!r} {what}")
    return path


def directory(text: str) -> Path:
    """A path to a folder that exists."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no folder {text!r}")
    return path
