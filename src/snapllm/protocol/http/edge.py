"""The request edge: what every entry point checks in raw input before a request model reads it.

    check_content_type(headers.get("content-type"))      # 415 unless JSON
    body = decode_json(raw, max_bytes=256 * 1024)         # 413, or 400 for bad UTF-8 / JSON / nesting
    route = routes.match(method, path)                    # the route, or 404 / 405 with Allow

The request models run :func:`check_json_value` on a direct invoke too; docs/api.md lists what is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from snapllm.errors import (
    HeadersTooLargeError,
    InvalidRequestError,
    MethodNotAllowedError,
    PayloadTooLargeError,
    RouteNotFoundError,
    UnsupportedMediaTypeError,
)

# Deeper than any request this API defines (a JSON schema in a tool definition included); shallow enough
# that no parser or serializer on the way recurses anywhere near its limit.
MAX_JSON_DEPTH = 64
# API Gateway HTTP APIs take at most 10 KB of request headers; the local front doors keep to the same.
MAX_HEADER_BYTES = 10 * 1024
# A number with more digits than this is no parameter of any request; Python would refuse past 4,300
# digits anyway, with a message about its own settings.
MAX_NUMBER_DIGITS = 100

_JSON_TYPES = ("application/json",)
# Characters no route has and no client means to send in a path: controls (a decoded %0A) and spaces.
_PATH_FORBIDDEN = re.compile("[\x00-\x20\x7f\ud800-\udfff]")
_PATH_PARAMETER = re.compile(r"\\\{\w+\\\}|<\w+>")
_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A JSON string (escapes included), or one bracket.
_JSON_NESTING = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]')
# The JSON escape of a surrogate code point (\ud800-\udfff), in either case.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def is_json_content_type(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type, any parameters; no header at all counts as JSON."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return not kind or kind in _JSON_TYPES or kind.endswith("+json")


def is_cors_preflight(method: str | None, headers: Mapping[str, str]) -> bool:
    """A browser's CORS preflight: OPTIONS with an Origin and Access-Control-Request-Method (no key), with
    ``headers`` keyed in lower case (API Gateway's event, or Starlette's headers)."""
    return method == "OPTIONS" and "origin" in headers and "access-control-request-method" in headers


def check_content_type(content_type: str | None) -> None:
    """Refuse a body that says it is not JSON (``curl -d`` sends form encoding unless told otherwise)."""
    if not is_json_content_type(content_type):
        raise UnsupportedMediaTypeError(
            f"the body must be application/json, not {content_type!r} "
            "(with curl, add -H 'Content-Type: application/json')"
        )


def check_body_size(size: int, *, max_bytes: int) -> None:
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"the request body is {size} bytes; this deployment accepts at most {max_bytes}"
        )


def check_path(path: str) -> None:
    """Refuse paths with control characters or whitespace before any router matches them.

    Route patterns end in ``$``, which also matches before a trailing newline: without this check
    ``/v1/chat/completions%0A`` would be served as ``/v1/chat/completions``.
    """
    if _PATH_FORBIDDEN.search(path):
        raise RouteNotFoundError(f"no route for {path!r}")


class RouteTable:
    """The paths an API serves and the methods of each: the one matcher behind every front door's 404
    and 405 answers. Paths are templates whose ``{name}`` (OpenAPI) or ``<name>`` (Powertools) segments
    match one path segment::

        routes = RouteTable({"/v1/chat/completions": ["POST"], "/v1/agent/runs/{run_id}": ["GET"]})
        routes.match("GET", "/v1/chat/completions")   # MethodNotAllowedError, allow=["POST"]
    """

    def __init__(self, routes: Mapping[str, Iterable[str]]) -> None:
        self.routes = {
            template: frozenset(method.upper() for method in methods) for template, methods in routes.items()
        }
        self._patterns = [
            (re.compile(_PATH_PARAMETER.sub("[^/]+", re.escape(template))), template, methods)
            for template, methods in self.routes.items()
        ]

    @classmethod
    def from_openapi(cls, document: Mapping[str, Any]) -> RouteTable:
        """The routes an OpenAPI document describes."""
        return cls(
            {
                path: [method for method in item if method.upper() in _HTTP_METHODS]
                for path, item in (document.get("paths") or {}).items()
            }
        )

    def match(self, method: str, path: str) -> str:
        """The template of the route that serves ``method path``.

        Raises :class:`RouteNotFoundError` (404) for an unknown path, :class:`MethodNotAllowedError` (405,
        with the methods the path has) for a known path with another method.
        """
        check_path(path)
        allowed: set[str] = set()
        for pattern, template, methods in self._patterns:
            if pattern.fullmatch(path):
                if method.upper() in methods:
                    return template
                allowed |= methods
        if allowed:
            raise MethodNotAllowedError(
                f"{method} is not allowed on {path}; it takes {', '.join(sorted(allowed))}", allow=allowed
            )
        raise RouteNotFoundError(f"no route for {method} {path!r}")


def check_headers(headers: Iterable[tuple[str, str]]) -> None:
    size = sum(len(name) + len(value) for name, value in headers)
    if size > MAX_HEADER_BYTES:
        raise HeadersTooLargeError(
            f"the request headers are {size} bytes; at most {MAX_HEADER_BYTES} are accepted"
        )


def _too_deep(where: str) -> NoReturn:
    raise InvalidRequestError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")


def _refuse_constant(name: str) -> NoReturn:
    raise InvalidRequestError(f"the request body is not valid JSON: {name} is not a JSON number")


def _parse_int(digits: str) -> int:
    if len(digits) > MAX_NUMBER_DIGITS:
        raise InvalidRequestError(f"the request body has a number of {len(digits)} digits")
    return int(digits)


def decode_json(raw: str | bytes, *, max_bytes: int | None = None) -> Any:
    """Decode a request body: strict UTF-8, strict JSON (no NaN), bounded size, nesting and numbers.

    Raises :class:`PayloadTooLargeError` (413) or :class:`InvalidRequestError` (400), never anything a
    caller would have to catch besides :class:`~snapllm.errors.RequestError`.
    """
    if max_bytes is not None:
        check_body_size(len(raw.encode() if isinstance(raw, str) else raw), max_bytes=max_bytes)
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("the request body is not valid UTF-8") from None
    try:
        return json.loads(raw, parse_constant=_refuse_constant, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        # The C decoder stops at its own depth limit (thousands of levels) with a clean RecursionError;
        # shallower bodies decode, and the request models refuse anything past MAX_JSON_DEPTH.
        _too_deep("the request body")


def _path(location: tuple[str | int, ...]) -> str | None:
    return ".".join(str(part) for part in location) or None


def is_unicode(text: str) -> bool:
    r"""Whether ``text`` is Unicode text, which UTF-8 can encode: no surrogate code points (a JSON string's
    ``\ud800`` escape decodes to one, and no tokenizer can read it)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decodes_to_unicode(text: str) -> bool:
    r"""Whether JSON text held in a string field, which is decoded again before a model reads it (a sent-back
    call's ``arguments``), decodes to Unicode text. ``{"a": "\ud800"}`` is ASCII, so it passes
    :func:`check_json_value` as the field's own text, and holds a lone surrogate once decoded. Text that is
    not JSON reaches the model as it is, so this is true of it. Decoded only when it holds a surrogate's
    escape."""
    if not _SURROGATE_ESCAPE.search(text):
        return True
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON: the text itself is what the model reads
        return True
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not is_unicode(item):
                return False
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _check_text(text: str, location: tuple[str | int, ...]) -> None:
    if not is_unicode(text):
        param = _path(location)
        raise InvalidRequestError(
            f"{param or 'the request'} contains an unpaired surrogate (\\ud800-\\udfff), which is not "
            "valid Unicode text",
            param=param,
        ) from None


def json_text_depth(text: str) -> int:
    """How deep the JSON in ``text`` nests (brackets outside strings), counted without decoding it: text that
    is not JSON gets a count too, which is at most its number of brackets."""
    depth = deepest = 0
    # Strings (with their escapes) are skipped whole; what is left are the brackets that nest.
    for token in _JSON_NESTING.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif bracket in "]}":
            depth -= 1
    return deepest


def check_json_value(value: Any) -> None:
    """Walk a decoded request (iteratively: no recursion to exhaust) and refuse what no model should see:
    nesting deeper than :data:`MAX_JSON_DEPTH`, and strings or keys that are not valid Unicode."""
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while pending:
        item, location = pending.pop()
        if isinstance(item, str):
            _check_text(item, location)
            continue
        if isinstance(item, dict):
            children: Iterable[tuple[str | int, Any]] = item.items()
        elif isinstance(item, list | tuple):
            children = enumerate(item)
        else:
            continue
        if len(location) >= MAX_JSON_DEPTH:
            _too_deep(_path(location[:3]) or "the request")
        for key, child in children:
            if isinstance(key, str):
                _check_text(key, location)
            pending.append((child, (*location, key)))
