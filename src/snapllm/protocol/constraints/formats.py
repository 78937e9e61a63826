"""The format checker an answer is validated with: jsonschema's, with ``iri`` and ``iri-reference`` added.

An IRI is checked as RFC 3987 section 3.1 maps it to a URI: its non-ASCII characters must be ``ucschar``
(``iprivate`` in the query only) and are percent-encoded as UTF-8; the result must then be a URI (or a URI
reference). docs/structured-output.md lists which formats are enforced and which are validated.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from jsonschema import FormatChecker
from rfc3986_validator import validate_rfc3986

#: RFC 3987's ``ucschar``: the non-ASCII characters an IRI may hold anywhere outside its scheme.
UCSCHAR = (
    (0xA0, 0xD7FF),
    (0xF900, 0xFDCF),
    (0xFDF0, 0xFFEF),
    *((plane, plane + 0xFFFD) for plane in range(0x10000, 0xE0000, 0x10000)),
    (0xE1000, 0xEFFFD),
)
#: RFC 3987's ``iprivate``: private-use characters, allowed in the query alone.
IPRIVATE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


def _within(character: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= ord(character) <= high for low, high in ranges)


def as_uri(iri: str) -> str | None:
    """``iri`` mapped to a URI (RFC 3987 section 3.1), or None when it holds a character no IRI may."""
    fragment = len(iri) if (hash_at := iri.find("#")) < 0 else hash_at
    query = iri.find("?", 0, fragment)
    out = []
    for at, character in enumerate(iri):
        if character.isascii():
            out.append(character)
        elif _within(character, UCSCHAR) or (0 <= query < at < fragment and _within(character, IPRIVATE)):
            out.append(quote(character, safe=""))
        else:
            return None
    return "".join(out)


def _iri_check(rule: str) -> Callable[[object], bool]:
    """A check of an IRI by rfc3986-validator's ``rule`` for the URI it maps to."""

    def check(instance: object) -> bool:
        if not isinstance(instance, str):
            return True
        uri = as_uri(instance)
        return uri is not None and bool(validate_rfc3986(uri, rule=rule))

    return check


FORMAT_CHECKER = FormatChecker()
FORMAT_CHECKER.checks("iri", raises=ValueError)(_iri_check("URI"))
FORMAT_CHECKER.checks("iri-reference", raises=ValueError)(_iri_check("URI_reference"))
