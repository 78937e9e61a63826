"""JSON schema to grammar: the llama.cpp grammar (GBNF) of compact JSON valid against a schema.

Pure Python (no llama.cpp), so the router refuses what cannot be served before invoking anything, and the
conversion is testable without a model::

    schema_grammar({"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                    "required": ["city"]}, param="response_format")
    # 'root ::= "{" root-1 "}"\\n...'   (generates {"city":"Paris"}, never { "city" : "Paris" })

Every request's cost is bounded here, before a grammar reaches llama.cpp:

- the work is linear in the schema: each ``$ref`` target becomes one rule, converted once however many
  places refer to it, and every step is counted against :data:`MAX_STEPS`;
- the grammar's size is bounded (:data:`MAX_GRAMMAR_CHARS`): a bounded repeat (``maxLength``,
  ``maxItems``, ``{m,n}`` in a pattern) becomes a chain of rules shared by every repeat of the same item;
- a number's bounds are digit ranges, one alternative per digit where the bounds part (16 digits at most),
  and ``multipleOf`` is a list or a machine of at most :data:`MAX_MULTIPLE_STATES` remainders;
- a recursive ``$ref`` is unrolled :data:`MAX_RECURSION` levels deep (:data:`MAX_REF_PATH` ``$ref``s in
  all), so a tree's grammar and llama.cpp's parse stack are bounded too;
- what makes llama.cpp's sampler slow is not a grammar's size but how many parses it keeps alive at once
  (one per alternative still possible). A repeat of a pattern part that can match nothing (``(a?){4096}``
  keeps 4,097 alive at every character) is refused, a pattern's expanded size is bounded
  (:data:`MAX_PATTERN_SIZE`), and so is how many alternatives nested ``anyOf``/``oneOf``/``enum``/type
  lists can keep open at one point (:data:`MAX_CHOICES`).

Each refusal is an :class:`~snapllm.errors.UnsupportedParameterError` that names the construct, where it is,
and why. What no grammar can hold (:data:`VALIDATED_KEYWORDS`, a lookaround in a pattern, a second string
constraint beside a format) is left out of the grammar and listed by :func:`unenforced`: the complete
answer is validated on it (:mod:`snapllm.protocol.answer_check`). The JSON is compact: no whitespace
between tokens, so no token is spent on padding.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

from snapllm.errors import UnsupportedParameterError

# Bounds on the work a schema causes (see the module's docstring).
MAX_STEPS = 50_000
MAX_GRAMMAR_CHARS = 1_000_000
MAX_PATTERN_SIZE = 4096
MAX_CHOICES = 256

# The formats the grammar spells out (the names pydantic and OpenAI use). Each is a subset of what its RFC
# allows, chosen so that every string it generates is valid (to the RFC and to pydantic's parsers): a
# day is never past its month's last (no 29 February at all), a year is 1000 or later, an IPv4 octet has
# no leading zero, a port is under 10000, a host's labels start with a letter, a URL is http or https.
_HEX = "[0-9a-fA-F]"
_DAY_MONTH = (
    '( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) '
    '| ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) '
    '| "02" "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )'
)
_DATE = f'[1-9] [0-9] [0-9] [0-9] "-" {_DAY_MONTH}'  # from year 1000: Python's dates start at year 1
_TIME = (
    '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9] [0-9] [0-9] )? '
    '( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
)
# ISO 8601 durations with whole numbers of up to 4 digits (what timedelta holds): P1Y2M3DT4H5M6S, P2W.
_N = "[0-9]{1,4}"
_DURATION = (
    f'"P" ( ( {_N} "Y" ( {_N} "M" )? ( {_N} "D" )? | {_N} "M" ( {_N} "D" )? | {_N} "D" ) '
    f'( "T" _TIME_PART )? | "T" _TIME_PART | {_N} "W" )'
).replace("_TIME_PART", f'( {_N} "H" ( {_N} "M" )? ( {_N} "S" )? | {_N} "M" ( {_N} "S" )? | {_N} "S" )')
# A host name label: a letter, then letters, digits and single hyphens inside (at most 61 characters).
_LABEL = '[a-zA-Z] ( "-"? [a-zA-Z0-9] ){0,30}'
# At most 4 labels: 4 x 61 + 3 dots stays under the 253 characters a host name may have.
_HOSTNAME = f'{_LABEL} ( "." {_LABEL} ){{0,3}}'
# A local part of at most 62 characters (64 allowed), then a domain with a dot and a top-level domain.
_ATOM = "[a-zA-Z0-9_+-]{1,20}"
_EMAIL = f'{_ATOM} ( "." {_ATOM} ){{0,2}} "@" {_LABEL} ( "." {_LABEL} ){{0,2}} "." [a-zA-Z]{{2,12}}'
_OCTET = '( "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9] )'
_IPV4 = f'{_OCTET} "." {_OCTET} "." {_OCTET} "." {_OCTET}'
_H16 = f"{_HEX}{{1,4}}"
# Eight groups, or "::" with at most three groups on each side (so it always stands for two or more).
_H16S = f'( {_H16} ( ":" {_H16} ){{0,2}} )?'
_IPV6 = f'( {_H16} ( ":" {_H16} ){{7}} | {_H16S} "::" {_H16S} )'
# A web URL (http or https://host[:port][/path][?query][#fragment]): the URIs "uri" is used for (pydantic's
# HttpUrl among them); a character outside the unreserved and sub-delimiter sets is percent-encoded.
_PCHAR = f'( [a-zA-Z0-9._~!$&\'()*+,;=:@-] | "%" {_HEX} {_HEX} )'
_URI = (
    f'"http" "s"? "://" {_HOSTNAME} ( ":" [1-9] [0-9]{{0,3}} )? '
    f'( "/" {_PCHAR}* )* ( "?" ( {_PCHAR} | [/?] )* )? ( "#" ( {_PCHAR} | [/?] )* )?'
)


def _uuid(version: str) -> str:
    third = f'"{version}" {_HEX} {_HEX} {_HEX}' if version else " ".join([_HEX] * 4)
    groups = [" ".join([_HEX] * 8), " ".join([_HEX] * 4), third, " ".join([_HEX] * 4), " ".join([_HEX] * 12)]
    return ' "-" '.join(groups)


FORMATS: Mapping[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f'{_DATE} "T" {_TIME}',
    "duration": _DURATION,
    "email": _EMAIL,
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uri": _URI,
    "uuid": _uuid(""),
    **{f"uuid{n}": _uuid(str(n)) for n in range(1, 6)},
}
# Keywords that only annotate: they constrain nothing, so ignoring them keeps every promise.
ANNOTATION_KEYWORDS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "strict",
        "discriminator",
        "nullable",
    }
)
# Keywords of JSON Schema that no grammar can hold (a set's uniqueness, a negation, a condition, counts of
# properties...): generation ignores them, and the complete answer is validated against the whole schema
# (snapllm.protocol.answer_check). Keywords the grammar holds only in part (a pattern with a lookaround,
# multipleOf beside a wide range, a length beside a format) are validated the same way; the converter
# lists each such place (:func:`unenforced`).
VALIDATED_KEYWORDS = frozenset(
    {
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "unevaluatedItems",
        "additionalItems",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "not",
        "if",
        "then",
        "else",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
# What a node's grammar ignores: the annotations, the definitions its $refs reach, and what is validated.
_ANNOTATIONS = ANNOTATION_KEYWORDS | {"$defs", "definitions"}
_OBJECT_KEYS = ("properties", "required", "additionalProperties")
_ARRAY_KEYS = ("items", "prefixItems", "minItems", "maxItems")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
# The largest magnitude a generated number has: 16 digits, as for any integer the grammar writes.
_MAX_DIGITS = 16
_LIMIT = 10**_MAX_DIGITS - 1
# multipleOf k over an unbounded range is a k-state machine of digits (k rules); a bounded range with at
# most this many multiples lists them.
MAX_MULTIPLE_STATES = 100
# How many times a recursive schema may nest in itself (a tree of this many levels below its root).
MAX_RECURSION = 8
# ... and at most this many $refs deep in all (a cycle through 40 definitions closes after its first turns).
MAX_REF_PATH = 64
# A character class that matches nothing: a recursion past its bound (an alternative that can never be taken).
_NOTHING = "[^\\x00-\\U0010FFFF]"
MAX_LISTED_MULTIPLES = 64
_TYPE_ORDER = ("object", "array", "string", "number", "integer", "boolean", "null")

# The JSON every schema builds on (names are prefixed per grammar). "char" is one character of a JSON
# string: anything but a quote, a backslash or a control character, or an escape.
_BASE_RULES = {
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ( member ( "," member )* )? "}"',
    "member": 'string ":" value',
    "array": '"[" ( value ( "," value )* )? "]"',
    "string": '"\\"" char* "\\""',
    "char": '[^"\\\\\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" ' + " ".join([_HEX] * 4) + " )",
    # Digits are bounded (16 significant, 16 decimals, 3 of exponent): a small model left free to write
    # digits may write them until max_tokens.
    "integer": '"-"? ( "0" | [1-9] up-to-15-digits )',
    "number": 'integer ( "." [0-9] up-to-15-digits )? ( [eE] [-+]? [0-9] up-to-2-digits )?',
    "boolean": '"true" | "false"',
    "null": '"null"',
}
# A GBNF token: a literal, a character class or a rule name (only the last is renamed).
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z][A-Za-z0-9-]*')
_BASE_REFS = {
    name: [other for other in _BASE_RULES if other != name and other in _TOKEN.findall(body)]
    for name, body in _BASE_RULES.items()
}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal (UTF-8 kept as is; quotes, backslashes and controls escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def json_literal(value: Any) -> str:
    """A JSON value as the GBNF literal of its compact text."""
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def text_without(word: str, name: str) -> str:
    """GBNF rules, the first named ``name``, for any text (the empty text too) that does not contain
    ``word``: one rule per prefix of ``word`` matched so far (the states of a string-search automaton), so
    the grammar follows free text one character per step and rejects ``word`` at its last character."""

    def after(matched: str, ch: str) -> int:
        # The length of the longest prefix of ``word`` that ``matched + ch`` ends with.
        text = matched + ch
        return next(n for n in range(min(len(text), len(word)), -1, -1) if text.endswith(word[:n]))

    rules = [f"{name} ::= {name}-0"]
    for state in range(len(word)):
        moves = {ch: after(word[:state], ch) for ch in dict.fromkeys(word)}
        # Every character that does not advance the match starts it afresh; ``word``'s last one is refused.
        restart = "".join(_class_char(ch) for ch, to in moves.items() if to)
        branches = [f"[^{restart}] {name}-0"]
        branches += [f"{literal(ch)} {name}-{to}" for ch, to in moves.items() if 0 < to < len(word)]
        rules.append(f"{name}-{state} ::= ( {' | '.join(branches)} )?")
    return "\n".join(rules) + "\n"


def _refuse(param: str, what: str, where: str, why: str) -> UnsupportedParameterError:
    place = where.lstrip(".") or "the root"
    return UnsupportedParameterError(f"{param}: {what} (at {place}) {why}", param=param)


def resolve_pointer(root: Any, ref: str) -> Any:
    """The part of ``root`` that a local ``$ref`` (``#``, ``#/$defs/a``, ``#/properties/a~1b``) names, or
    raises KeyError."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise KeyError(ref)
    target = root
    for raw in ref[2:].split("/"):
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise KeyError(ref)
    return target


@dataclass
class _Grammar:
    """The rules written so far, with the counters that bound a conversion."""

    param: str
    prefix: str
    rules: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # body -> rule name, so equal rules are shared
    chains: dict[str, list[str]] = field(default_factory=dict)  # item -> rules "up to k more items"
    chars: int = 0
    steps: int = 0
    # "keyword (at where)" for each constraint the grammar does not hold, in the order met.
    validated: dict[str, None] = field(default_factory=dict)

    def note(self, what: str, where: str) -> None:
        """``what`` (at ``where``) is left to the validation of the complete answer."""
        self.validated[f"{what} (at {where.lstrip('.') or 'the root'})"] = None

    def step(self, where: str) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _refuse(
                self.param, "the schema", where, f"needs more than {MAX_STEPS} steps to turn into a grammar"
            )

    def base(self, name: str) -> str:
        """One of the shared JSON rules (``value``, ``string``...), written with what it refers to."""
        full = self.prefix + name
        if full not in self.rules:
            body = _BASE_RULES[name]
            for count in (15, 2):
                body = body.replace(f"up-to-{count}-digits", self.repeat("[0-9]", 0, count))
            if self.prefix:
                body = _TOKEN.sub(
                    lambda m: self.prefix + m.group() if m.group() in _BASE_RULES else m.group(), body
                )
            self.define(full, body)
            for other in _BASE_REFS[name]:
                self.base(other)
        return full

    def define(self, name: str, body: str) -> None:
        self.rules[name] = body
        self.chars += len(name) + len(body) + 6
        if self.chars > MAX_GRAMMAR_CHARS:
            raise UnsupportedParameterError(
                f"{self.param}: the schema's grammar would be over {MAX_GRAMMAR_CHARS} characters; its "
                "repeat counts (maxLength, maxItems, pattern repeats) add up to too much",
                param=self.param,
            )

    def reserve(self, hint: str) -> str:
        name = f"{self.prefix}{hint}-{len(self.rules) + 1}"
        self.rules[name] = ""
        return name

    def rule(self, body: str, hint: str = "r") -> str:
        """A rule with ``body`` (an existing one if another rule has the same body)."""
        if body in self.names:
            return self.names[body]
        name = f"{self.prefix}{hint}-{len(self.rules) + 1}"
        self.define(name, body)
        self.names[body] = name
        return name

    def repeat(self, item: str, low: int, high: int | None) -> str:
        """``item`` (a rule name or a literal) repeated ``low`` to ``high`` (None: no bound) times.

        The optional part is a chain (``up-to-k ::= item up-to-(k-1) | ""``) shared by every repeat of the
        same item, so llama.cpp keeps two parses alive, not one per count, and the grammar grows with the
        largest count rather than their sum."""
        parts = [item] * low
        if high is None:
            parts.append(self._star(item))
        elif high > low:
            parts.append(self._up_to(item, high - low))
        if len(parts) > 16:
            return self.rule(" ".join(parts), "rep")
        return " ".join(p for p in parts if p) or '""'

    def _star(self, item: str) -> str:
        key = f"*{item}"
        if key not in self.names:
            name = self.reserve("many")
            self.names[key] = name
            self.define(name, f'{item} {name} | ""')
        return self.names[key]

    def _up_to(self, item: str, count: int) -> str:
        built = self.chains.setdefault(item, [])
        for k in range(len(built) + 1, count + 1):
            name = self.reserve(f"upto{k}")
            self.define(name, f'{item} {built[-1]} | ""' if built else f'{item} | ""')
            built.append(name)
        return built[count - 1]

    def text(self, root: str) -> str:
        lines = [f"{self.prefix}root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"


class _Converter:
    def __init__(self, root: Mapping[str, Any], grammar: _Grammar) -> None:
        self.root = root
        self.g = grammar
        self.param = grammar.param
        # The rule of each $ref at each level of recursion ("level:ref"), and how often each $ref is on the
        # path being converted (its level there).
        self.ref_rules: dict[str, str] = {}
        self.ref_choices: dict[str, int] = {}
        self.depth: dict[str, int] = {}
        # The $refs entered since the last "{" or "[": one met again here would be a rule that reaches
        # itself before reading a character (left recursion), which no parser can run.
        self.unguarded: set[str] = set()

    # --- schemas ---------------------------------------------------------------------------------------

    def schema(self, node: Any, where: str) -> tuple[str, int]:
        """The GBNF expression for ``node`` and how many alternatives it can keep open at once."""
        self.g.step(where)
        if node is True or node == {}:
            return self.g.base("value"), 1
        if not isinstance(node, Mapping):
            raise _refuse(self.param, "a schema that is not an object", where, "cannot be generated")
        constraining = {k: v for k, v in node.items() if k not in _ANNOTATIONS}
        for keyword in constraining.keys() & VALIDATED_KEYWORDS:
            self.g.note(keyword, where)
        constraining = {k: v for k, v in constraining.items() if k not in VALIDATED_KEYWORDS}
        if not constraining:
            return self.g.base("value"), 1
        if "$ref" in constraining:
            rest = {k: v for k, v in constraining.items() if k != "$ref"}
            target = self._target(constraining["$ref"], where)
            if not rest:
                return self.ref(constraining["$ref"], where)
            return self.schema(self.merge(target, rest, where), where)
        if "allOf" in constraining:
            merged: dict[str, Any] = {k: v for k, v in constraining.items() if k != "allOf"}
            for index, part in enumerate(constraining["allOf"]):
                merged = self.merge(merged, self._inline(part, f"{where}.allOf[{index}]"), where)
            return self.schema(merged, where)
        for key in ("anyOf", "oneOf"):
            if key in constraining:
                rest = {k: v for k, v in constraining.items() if k != key}
                branches = [
                    self.merge(rest, self._inline(part, f"{where}.{key}[{i}]"), where) if rest else part
                    for i, part in enumerate(constraining[key])
                ]
                return self.choice(
                    [self.schema(b, f"{where}.{key}[{i}]") for i, b in enumerate(branches)], where
                )
        if "const" in constraining:
            return json_literal(constraining["const"]), 1
        if "enum" in constraining:
            return self.enum(constraining, where)
        return self.typed(constraining, where)

    def ref(self, ref: str, where: str) -> tuple[str, int]:
        """The rule of a ``$ref``'s target. A recursive schema (a tree) is unrolled: each time its ``$ref``
        is met inside itself it is the next level's rule, down to :data:`MAX_RECURSION` levels, where the
        recursion is closed (an array of it must be empty, an optional one left out). So llama.cpp's parse
        stack stays as shallow as the schema's nesting times that bound, and the grammar grows with the
        bound, not with the answer."""
        if ref in self.unguarded:
            raise _refuse(
                self.param,
                f"the recursive $ref {ref}",
                where,
                "refers back to itself before any object or array opens, so no value of it can end",
            )
        level = self.depth.get(ref, 0)
        if level > MAX_RECURSION or (level and sum(self.depth.values()) > MAX_REF_PATH):
            return _NOTHING, 1
        key = f"{level}:{ref}"
        if key in self.ref_rules:
            return self.ref_rules[key], self.ref_choices[key]
        target = self._target(ref, where)
        name = self.g.reserve("ref")
        self.ref_rules[key] = name
        self.depth[ref] = level + 1
        self.unguarded.add(ref)
        expression, choices = self.schema(target, ref[2:] or "the root")
        self.depth[ref] = level
        self.unguarded.discard(ref)
        self.g.define(name, expression)
        self.ref_choices[key] = choices
        return name, choices

    def _target(self, ref: Any, where: str) -> Any:
        if not isinstance(ref, str):
            raise _refuse(self.param, "a $ref that is not a string", where, "cannot be resolved")
        try:
            return resolve_pointer(self.root, ref)
        except KeyError:
            raise _refuse(self.param, f"the $ref {ref}", where, "points at nothing in the schema") from None

    def _inline(self, node: Any, where: str) -> Any:
        """``node`` with a top-level ``$ref`` replaced by its target (for merging)."""
        seen: set[str] = set()
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen or self.depth.get(ref, 0):
                raise _refuse(
                    self.param,
                    f"the recursive $ref {ref}",
                    where,
                    "refers back to itself inside allOf or beside other keywords, which cannot be merged",
                )
            seen.add(ref)
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = self.merge(self._target(ref, where), rest, where) if rest else self._target(ref, where)
        return node

    def merge(self, a: Any, b: Any, where: str) -> dict[str, Any]:
        """Two schemas that must both hold, as one (what ``allOf`` and keywords beside ``$ref`` mean)."""
        self.g.step(where)
        a, b = self._inline(a, where), self._inline(b, where)
        if a is True:
            a = {}
        if b is True:
            b = {}
        if not isinstance(a, Mapping) or not isinstance(b, Mapping):
            raise _refuse(self.param, "allOf with a part that is not an object", where, "cannot be merged")
        out = dict(a)
        for key, value in b.items():
            if key not in out or key in _ANNOTATIONS or key in VALIDATED_KEYWORDS:
                # A validated keyword of either part is checked on the answer against the whole schema;
                # the merged node only has to carry one for the grammar to note it.
                out[key] = value
            elif key in _LOWER_BOUNDS and _is_number(value) and _is_number(out[key]):
                out[key] = max(out[key], value)
            elif key in _UPPER_BOUNDS and _is_number(value) and _is_number(out[key]):
                out[key] = min(out[key], value)
            elif key == "properties":
                props = dict(out[key])
                for name, sub in value.items():
                    props[name] = {"allOf": [props[name], sub]} if name in props else sub
                out[key] = props
            elif key == "required":
                out[key] = list(dict.fromkeys([*out[key], *value]))
            elif key == "type":
                left = out[key] if isinstance(out[key], list) else [out[key]]
                right = value if isinstance(value, list) else [value]
                both = [t for t in left if t in right or (t == "integer" and "number" in right)]
                both += [t for t in right if t == "integer" and "number" in left and t not in both]
                if not both:
                    raise _refuse(
                        self.param, "allOf with types that exclude each other", where, "allows no value"
                    )
                out[key] = both
            elif key in ("allOf", "anyOf", "oneOf"):
                out[key] = (
                    [{"allOf": [x, y]} for x in out[key] for y in value]
                    if key != "allOf"
                    else [
                        *out[key],
                        *value,
                    ]
                )
                if key != "allOf" and len(out[key]) > MAX_CHOICES:
                    raise _refuse(
                        self.param, f"allOf of several {key}", where, f"makes over {MAX_CHOICES} choices"
                    )
            elif out[key] != value:
                raise _refuse(
                    self.param,
                    f"allOf with two different {key} values",
                    where,
                    "cannot be merged into one grammar",
                )
        return out

    def choice(self, options: list[tuple[str, int]], where: str) -> tuple[str, int]:
        expressions = list(dict.fromkeys(expression for expression, _ in options))
        choices = sum(c for _, c in options)
        if choices > MAX_CHOICES:
            raise _refuse(
                self.param,
                "anyOf/oneOf/enum/type choices",
                where,
                f"keep {choices} alternatives open at once (at most {MAX_CHOICES}); nested choices multiply",
            )
        if len(expressions) == 1:
            return expressions[0], choices
        return self.g.rule(" | ".join(expressions), "choice"), choices

    def enum(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        values = node["enum"]
        if not isinstance(values, list) or not values:
            raise _refuse(self.param, "an empty enum", where, "allows no value at all")
        types = node.get("type")
        if types is not None:
            allowed = types if isinstance(types, list) else [types]
            values = [
                v
                for v in values
                if _json_type(v) in allowed or (_json_type(v) == "integer" and "number" in allowed)
            ]
            if not values:
                raise _refuse(
                    self.param, "an enum whose values are not of its type", where, "allows no value"
                )
        return self.choice([(json_literal(v), 1) for v in values], where)

    def typed(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        types = node.get("type")
        if types is None:
            implied = [
                kind
                for kind, keys in (
                    ("object", _OBJECT_KEYS),
                    ("array", _ARRAY_KEYS),
                    ("string", _STRING_KEYS),
                    ("number", _NUMBER_KEYS),
                )
                if any(k in node for k in keys)
            ]
            if not implied:
                return self.g.base("value"), 1
            types = implied
        listed = types if isinstance(types, list) else [types]
        if not listed:
            raise _refuse(self.param, "an empty type list", where, "allows no value")
        kinds = [t for t in _TYPE_ORDER if t in listed and not (t == "integer" and "number" in listed)]
        options = [self.of_type(kind, node, where) for kind in kinds]
        return self.choice(options, where)

    def of_type(self, kind: str, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        if kind == "object":
            return self.object(node, where)
        if kind == "array":
            return self.array(node, where)
        if kind == "string":
            return self.string(node, where), 1
        if kind in ("integer", "number"):
            return self.numeric(kind, node, where)
        return self.g.base(kind), 1

    def object(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        guarded, self.unguarded = self.unguarded, set()
        try:
            return self._object(node, where)
        finally:
            self.unguarded = guarded

    def array(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        guarded, self.unguarded = self.unguarded, set()
        try:
            return self._array(node, where)
        finally:
            self.unguarded = guarded

    def _object(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        properties = node.get("properties") or {}
        required = list(dict.fromkeys(node.get("required") or []))
        extra = node.get("additionalProperties", True)
        listed: list[tuple[str, Any]] = list(properties.items())
        for name in required:
            if name not in properties:
                if extra is False:
                    raise _refuse(
                        self.param,
                        f"required {name!r}",
                        where,
                        "is not in properties and additionalProperties is false, so no object is valid",
                    )
                listed.append((name, {} if extra is True else extra))
        if not listed:
            # "properties": {} lists none, so only {} (what tools without arguments declare); an object
            # schema that lists nothing at all ({"type": "object"}) is any object.
            if extra is False or (extra is True and "properties" in node):
                return literal("{}"), 1
            if extra is True:
                return self.g.base("object"), 1
            value, choices = self.schema(extra, f"{where}.additionalProperties")
            member = self.g.rule(f'{self.g.base("string")} ":" {value}', "member")
            return self.g.rule(f'"{{" ( {member} ( "," {member} )* )? "}}"', "map"), choices
        # Members in the order listed; each optional one may be left out. Built from the end: first[i] is
        # what may follow "{" from member i on, later[i] what may follow a member (with its comma).
        members = []
        widest = 1
        for name, sub in listed:
            value, choices = self.schema(sub, f"{where}.properties.{name}")
            widest = max(widest, choices)
            members.append(
                (
                    self.g.rule(f"{literal(json.dumps(name, ensure_ascii=False) + ':')} {value}", "kv"),
                    name in required,
                )
            )
        first, later = '""', '""'
        optional_run = 0
        for member, is_required in reversed(members):
            if is_required:
                first = self.g.rule(f"{member} {later}".replace(' ""', ""), "props")
                later = self.g.rule(f'"," {member} {later}'.replace(' ""', ""), "props")
                optional_run = 0
            else:
                optional_run += 1
                first = self.g.rule(f"{member} {later} | {first}".replace(' ""', "", 1), "props")
                later = self.g.rule(f'"," {member} {later} | {later}'.replace(' ""', "", 1), "props")
        if widest * max(optional_run, 1) > MAX_CHOICES * 4:
            raise _refuse(self.param, "optional properties", where, "keep too many alternatives open at once")
        return self.g.rule(f'"{{" {first} "}}"'.replace(' "" ', " "), "obj"), widest

    def _array(self, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        low = int(node.get("minItems", 0))
        high = node.get("maxItems")
        items = node.get("items", True)
        prefix = node.get("prefixItems") or []
        if isinstance(items, list):  # the older tuple form: its items, then anything
            prefix, items = items, True
        if high is not None and low > high:
            raise _refuse(self.param, "minItems over maxItems", where, "allows no array")
        if high is not None:
            prefix = prefix[:high]
        tail_schema = True if items is None else items
        if tail_schema is False:
            tail = None
        else:
            tail, _ = self.schema(tail_schema, f"{where}.items")
        positional = [self.schema(p, f"{where}.prefixItems[{i}]")[0] for i, p in enumerate(prefix)]
        k = len(positional)
        if tail is None and low > k:
            raise _refuse(self.param, "minItems over the items allowed", where, "allows no array")
        # After the positional items: more of `items`, each after a comma.
        more_low = max(low - k, 0)
        more_high = None if high is None else high - k
        if tail is None or more_high == 0:
            rest = '""'
        else:
            separated = self.g.rule(f'"," {tail}', "next")
            rest = self.g.repeat(separated, more_low, more_high)
        if k == 0:
            if tail is None or high == 0:
                return literal("[]"), 1
            first_low = max(low - 1, 0)
            first_high = None if high is None else high - 1
            separated = self.g.rule(f'"," {tail}', "next")
            body = f"{tail} {self.g.repeat(separated, first_low, first_high)}"
            body = self.g.rule(body if low > 0 else f'{body} | ""', "items")
            return self.g.rule(f'"[" {body} "]"', "arr"), 1
        body = rest
        for index in range(k - 1, -1, -1):
            comma = '"," ' if index else ""
            sequence = f"{comma}{positional[index]} {body}"
            body = self.g.rule(sequence if index < low else f'{sequence} | ""', "tuple")
        return self.g.rule(f'"[" {body} "]"', "arr"), 1

    def string(self, node: Mapping[str, Any], where: str) -> str:
        """A string under one of its format, its pattern or its lengths (in that order of preference); a
        grammar cannot hold two of them at once, so the others are validated on the answer."""
        fmt, pattern = node.get("format"), node.get("pattern")
        low, high = int(node.get("minLength", 0)), node.get("maxLength")
        if high is not None and low > high:
            raise _refuse(self.param, "minLength over maxLength", where, "allows no string")
        lengths = [k for k in ("minLength", "maxLength") if k in node]
        if fmt is not None:
            if fmt not in FORMATS:
                raise _refuse(self.param, f"format {fmt!r}", where, "has no grammar")
            for other in ([] if pattern is None else ["pattern"]) + lengths:
                self.g.note(f"{other} beside format {fmt!r}", where)
            return self.g.rule(f'"\\"" {FORMATS[fmt]} "\\""', f"fmt-{fmt}")
        if pattern is not None:
            inexpressible = pattern_needs_validation(pattern)
            if inexpressible is None:
                for other in lengths:
                    self.g.note(f"{other} beside a pattern", where)
                inner = pattern_grammar(pattern, self.g, where)
                return self.g.rule(f'"\\"" {inner} "\\""', "pattern")
            self.g.note(f"pattern {pattern[:60]!r} ({inexpressible})", where)
        char = self.g.base("char")
        if low == 0 and high is None:
            return self.g.base("string")
        return self.g.rule(f'"\\"" {self.g.repeat(char, low, high)} "\\""', "str")

    # --- numbers ------------------------------------------------------------------------------------------

    def numeric(self, kind: str, node: Mapping[str, Any], where: str) -> tuple[str, int]:
        """An integer or a number within its bounds, and a multiple of its ``multipleOf`` where a grammar
        can say so (see docs/decoding.md for what is exact)."""
        low, low_open = _bound(node, "minimum", "exclusiveMinimum", max)
        high, high_open = _bound(node, "maximum", "exclusiveMaximum", min)
        # A bound past what the grammar writes (16 digits) on the outer side bounds nothing it generates; on
        # the inner side (minimum 1e20) it leaves only numbers the grammar does not write: validated.
        if (low is not None and low > _LIMIT) or (high is not None and high < -_LIMIT):
            self.g.note("a bound beyond 16 digits", where)
            return self.g.base(kind), 1
        low = None if low is not None and low < -_LIMIT else low
        high = None if high is not None and high > _LIMIT else high
        multiple = node.get("multipleOf")
        decimals = _MAX_DIGITS
        if multiple is not None and (not _is_number(multiple) or multiple <= 0):
            raise _refuse(self.param, f"multipleOf {multiple!r}", where, "must be a number above 0")
        if multiple is not None:
            step = Fraction(str(multiple))
            if step.denominator == 1:
                kind = "integer"  # a number that is a multiple of an integer: its integer multiples
            elif kind == "number" and step.numerator == 1 and _power_of_ten(step.denominator):
                decimals = len(str(step.denominator)) - 1  # 0.01: at most two decimals, all multiples
                multiple = None
            elif kind == "integer" and (1 / step).denominator == 1:
                multiple = None  # every integer is a multiple of 1/n
            else:
                self.g.note("multipleOf", where)
                multiple = None
        if kind == "integer":
            first = None if low is None else _ceil(low) + (1 if low_open and low == _ceil(low) else 0)
            last = None if high is None else _floor(high) - (1 if high_open and high == _floor(high) else 0)
            if first is not None and last is not None and first > last:
                raise _refuse(self.param, "minimum over maximum", where, "allows no integer")
            step_k = None if multiple is None else int(Fraction(str(multiple)))
            return self.integers(first, last, step_k, where), 1
        if low is None and high is None and decimals == _MAX_DIGITS:
            return self.g.base("number"), 1
        if low is not None and high is not None and (low > high or (low == high and (low_open or high_open))):
            raise _refuse(self.param, "minimum over maximum", where, "allows no number")
        return self.decimals(low, low_open, high, high_open, decimals, where), 1

    def integers(self, first: int | None, last: int | None, multiple: int | None, where: str) -> str:
        """Integers from ``first`` to ``last`` (None: no bound), canonical (no leading zero, no -0)."""
        if multiple is not None and multiple > 1:
            low = -_LIMIT if first is None else max(first, -_LIMIT)
            high = _LIMIT if last is None else min(last, _LIMIT)
            count = high // multiple - (low + multiple - 1) // multiple + 1
            if count <= 0:
                raise _refuse(self.param, f"multipleOf {multiple}", where, "leaves no integer in the range")
            if count <= MAX_LISTED_MULTIPLES:
                start = (low + multiple - 1) // multiple * multiple
                values = [str(v) for v in range(start, high + 1, multiple)]
                return self.g.rule(" | ".join(literal(v) for v in values), "multiples")
            if last is None and first in (None, 0, 1) and multiple <= MAX_MULTIPLE_STATES:
                return self.multiples(multiple, signed=first is None, zero=first != 1)
            self.g.note(f"multipleOf {multiple}", where)
        if first is None and last is None:
            return self.g.base("integer")
        low = -_LIMIT if first is None else max(first, -_LIMIT)
        high = _LIMIT if last is None else min(last, _LIMIT)
        if low > high:
            raise _refuse(self.param, "its bounds", where, "leave no integer the grammar can write")
        parts = []
        if high >= 0:
            parts.append(self.digits(max(low, 0), high))
        if low < 0:
            parts.append(f'"-" {_group(self.digits(max(-high, 1), -low))}')
        return parts[0] if len(parts) == 1 else self.g.rule(" | ".join(parts), "ints")

    def decimals(
        self,
        a: Fraction | None,
        a_open: bool,
        b: Fraction | None,
        b_open: bool,
        places: int,
        where: str,
    ) -> str:
        """Numbers (without exponent, at most ``places`` decimals) above ``a`` and below ``b`` (None: no
        bound; each bound open or closed), exactly: the integer part is a digit range, and at a bound's own
        integer part the fraction is compared with the bound's digits, one digit at a time."""
        parts = []
        if b is None or b > 0 or (b == 0 and not b_open):
            # Non-negative values: the magnitude is the value.
            bottom, bottom_open = (Fraction(0), False) if a is None or a < 0 else (a, a_open)
            parts += self.magnitudes(bottom, bottom_open, b, b_open, places)
        if a is None or a < 0:
            # Negative values, -m: the magnitude m lies between -b and -a, and is never 0.
            bottom, bottom_open = (Fraction(0), True) if b is None or b >= 0 else (-b, b_open)
            top, top_open = (None, False) if a is None else (-a, a_open)
            negative = self.magnitudes(bottom, bottom_open, top, top_open, places)
            if negative:
                parts.append(f'"-" {_group(self.g.rule(" | ".join(negative), "neg"))}')
        if not parts:
            raise _refuse(self.param, "its bounds", where, "leave no number the grammar can write")
        return parts[0] if len(parts) == 1 else self.g.rule(" | ".join(parts), "num")

    def magnitudes(
        self, low: Fraction, low_open: bool, high: Fraction | None, high_open: bool, places: int
    ) -> list[str]:
        """The alternatives for a magnitude m >= 0 (an integer part, then "." and up to ``places``
        decimals) with low < m or low <= m, and m < high or m <= high (None: unbounded)."""
        above = ">" if low_open else ">="
        below = "<" if high_open else "<="
        low_int, low_digits = _split(low)
        high_int, high_digits = (None, "") if high is None else _split(high)
        out = []
        if low_int > _LIMIT:
            return out
        if high_int is not None and high_int == low_int:
            fraction = self.fraction(self.between(low_digits, high_digits, places, above, below))
            if fraction is not None:
                out.append(f"{_group(self.digits(low_int, low_int))} {fraction}")
            return out
        fraction = self.fraction(self.compared(low_digits, places, above))
        if fraction is not None:
            out.append(f"{_group(self.digits(low_int, low_int))} {fraction}")
        last = _LIMIT if high_int is None else min(high_int - 1, _LIMIT)
        if low_int + 1 <= last:
            fraction = self.fraction(self.compared("", places, ">="))
            out.append(f"{_group(self.digits(low_int + 1, last))} {fraction}")
        if high_int is not None and high_int <= _LIMIT:
            fraction = self.fraction(self.compared(high_digits, places, below))
            if fraction is not None:
                out.append(f"{_group(self.digits(high_int, high_int))} {fraction}")
        return out

    def fraction(self, digits: tuple[list[str], bool] | None) -> str | None:
        """The fraction part of a number from the digit strings :meth:`compared` allows: "." and one or more
        of them, or nothing when no digits (the value's fraction 0) is allowed; None: no fraction is."""
        if digits is None:
            return None
        options, empty = digits
        parts = ([f'"." {_group(self.g.rule(" | ".join(options), "frac"))}'] if options else []) + (
            ['""'] if empty else []
        )
        if not parts:
            return None
        return self.g.rule(" | ".join(parts), "frac")

    def compared(self, bound: str, places: int, relation: str) -> tuple[list[str], bool] | None:
        """The digit strings d (1 to ``places`` long) with 0.d ``relation`` 0.``bound`` (the bound's
        decimals), as alternatives, and whether no digits at all (0) qualifies; None: nothing does."""
        self.g.step("a fraction range")
        empty = _holds(_compare_to_zero(bound), relation)
        if places == 0:
            return ([], empty) if empty else None
        first = int(bound[0]) if bound else 0
        rest = bound[1:]
        anything = self.g.repeat("[0-9]", 0, places - 1)
        options = []
        if ">" in relation and first < 9:
            options.append(f"{_digit_class(first + 1, 9)} {anything}")
        if "<" in relation and first > 0:
            options.append(f"{_digit_class(0, first - 1)} {anything}")
        same = self.compared(rest, places - 1, relation)
        if same is not None:
            tail = same[0] + (['""'] if same[1] else [])
            options.append(f"{literal(str(first))} {_group(self.g.rule(' | '.join(tail), 'frac'))}")
        return (options, empty) if options or empty else None

    def between(
        self, low: str, high: str, places: int, above: str, below: str
    ) -> tuple[list[str], bool] | None:
        """The digit strings d with 0.``low`` (``above``) 0.d (``below``) 0.``high``, as :meth:`compared`."""
        self.g.step("a fraction range")
        empty = _holds(_compare_to_zero(low), above) and _holds(_compare_to_zero(high), below)
        if places == 0:
            return ([], empty) if empty else None
        first, last = (int(low[0]) if low else 0), (int(high[0]) if high else 0)
        options = []
        if first == last:
            same = self.between(low[1:], high[1:], places - 1, above, below)
            if same is not None:
                tail = same[0] + (['""'] if same[1] else [])
                options.append(f"{literal(str(first))} {_group(self.g.rule(' | '.join(tail), 'frac'))}")
            return (options, empty) if options or empty else None
        for digit, bound, relation in ((first, low[1:], above), (last, high[1:], below)):
            part = self.compared(bound, places - 1, relation)
            if part is not None:
                tail = part[0] + (['""'] if part[1] else [])
                options.append(f"{literal(str(digit))} {_group(self.g.rule(' | '.join(tail), 'frac'))}")
        if first + 1 <= last - 1:
            options.append(f"{_digit_class(first + 1, last - 1)} {self.g.repeat('[0-9]', 0, places - 1)}")
        return (options, empty) if options or empty else None

    def digits(self, low: int, high: int) -> str:
        """The decimal integers from ``low`` to ``high`` (0 <= low <= high), without leading zeros: one
        alternative per digit position where they part, so the grammar grows with the number of digits."""
        small, large = str(low), str(high)
        if len(small) == len(large):
            return self.same_length(small, large)
        parts = [self.same_length(small, "9" * len(small))]
        if len(large) - len(small) >= 2:
            parts.append(f"[1-9] {self.g.repeat('[0-9]', len(small), len(large) - 2)}")
        parts.append(self.same_length("1" + "0" * (len(large) - 1), large))
        return self.g.rule(" | ".join(parts), "digits")

    def same_length(self, low: str, high: str) -> str:
        """The digit strings from ``low`` to ``high``, both of the same length."""
        self.g.step("a digit range")
        if low == high:
            return literal(low)
        shared = 0
        while low[shared] == high[shared]:
            shared += 1
        if shared:
            return f"{literal(low[:shared])} {_group(self.same_length(low[shared:], high[shared:]))}"
        rest = len(low) - 1
        if rest == 0:
            return f"[{low}-{high}]"
        from_zero, to_nine = low[1:] == "0" * rest, high[1:] == "9" * rest
        first, last = int(low[0]) + (0 if from_zero else 1), int(high[0]) - (0 if to_nine else 1)
        parts = []
        if not from_zero:
            parts.append(f"{literal(low[0])} {_group(self.same_length(low[1:], '9' * rest))}")
        if first <= last:
            digit = literal(str(first)) if first == last else f"[{first}-{last}]"
            parts.append(f"{digit} {self.g.repeat('[0-9]', rest, rest)}")
        if not to_nine:
            parts.append(f"{literal(high[0])} {_group(self.same_length('0' * rest, high[1:]))}")
        return self.g.rule(" | ".join(parts), "digits")

    def multiples(self, k: int, *, signed: bool, zero: bool) -> str:
        """The multiples of ``k`` (no bound on the magnitude): the digits read through the k remainders,
        one rule each, ending where the remainder is 0."""
        names = [self.g.reserve(f"mod{k}") for _ in range(k)]

        def moves(state: int, digits: range) -> list[str]:
            targets: dict[int, list[str]] = {}
            for d in digits:
                targets.setdefault((state * 10 + d) % k, []).append(str(d))
            return [f"[{''.join(ds)}] {names[t]}" for t, ds in targets.items()]

        for state, name in enumerate(names):
            self.g.define(name, " | ".join(moves(state, range(10)) + (['""'] if state == 0 else [])))
        nonzero = self.g.rule(" | ".join(moves(0, range(1, 10))), f"mult{k}")
        body = f'"-"? {_group(nonzero)}' if signed else nonzero
        return self.g.rule(f'"0" | {body}' if zero else body, f"mult{k}")


_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bound(node: Mapping[str, Any], closed: str, opened: str, tighter: Any) -> tuple[Fraction | None, bool]:
    """A side's bound as an exact fraction (None: none) and whether it is open (exclusive)."""
    found: list[tuple[Fraction, bool]] = []
    for key, is_open in ((closed, False), (opened, True)):
        value = node.get(key)
        if _is_number(value) and math.isfinite(value):
            found.append((Fraction(str(value)), is_open))
    if not found:
        return None, False
    best = tighter(v for v, _ in found)
    return best, any(v == best and is_open for v, is_open in found)


def _split(value: Fraction) -> tuple[int, str]:
    """A non-negative bound's integer part and its decimals as digits ("0.25" -> (0, "25")); a bound with
    more decimals than any number the grammar writes keeps the first 40 (enough to compare with 16)."""
    whole = math.floor(value)
    rest, digits = value - whole, ""
    while rest and len(digits) < 40:
        rest *= 10
        digit = math.floor(rest)
        digits += str(digit)
        rest -= digit
    return whole, digits


def _compare_to_zero(digits: str) -> int:
    """How 0 compares with 0.``digits``: 0 when they are equal, else -1."""
    return 0 if set(digits) <= {"0"} else -1


def _holds(comparison: int, relation: str) -> bool:
    """Whether a comparison's result (-1, 0, 1: the value against the bound) satisfies ``relation``."""
    return {">": comparison > 0, ">=": comparison >= 0, "<": comparison < 0, "<=": comparison <= 0}[relation]


def _digit_class(first: int, last: int) -> str:
    return literal(str(first)) if first == last else f"[{first}-{last}]"


def _floor(value: Fraction) -> int:
    return math.floor(value)


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def _power_of_ten(n: int) -> bool:
    text = str(n)
    return text.startswith("1") and set(text[1:]) <= {"0"} and len(text) <= _MAX_DIGITS


def _group(expression: str) -> str:
    """``expression`` as one item of a sequence (parenthesized when it has alternatives)."""
    return f"( {expression} )" if " | " in expression else expression


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _convert(schema: Any, param: str, prefix: str) -> tuple[_Grammar, str]:
    if not isinstance(schema, Mapping) and not isinstance(schema, bool):
        raise UnsupportedParameterError(f"{param}: the schema must be a JSON object", param=param)
    grammar = _Grammar(param=param, prefix=prefix)
    root = schema if isinstance(schema, Mapping) else {}
    if schema is False:
        raise _refuse(param, "a false schema", "", "allows no value")
    expression, _ = _Converter(root, grammar).schema(schema, "")
    return grammar, expression


def schema_grammar(schema: Any, *, param: str, prefix: str = "") -> str:
    """The GBNF grammar (root rule ``{prefix}root``) of compact JSON valid against ``schema``, but for what
    :func:`unenforced` lists; raises :class:`UnsupportedParameterError` naming what cannot be generated or
    would cost too much."""
    grammar, expression = _convert(schema, param, prefix)
    return grammar.text(expression)


def unenforced(schema: Any, *, param: str) -> list[str]:
    """The constraints of ``schema`` its grammar does not hold, each with where it is (``uniqueItems (at
    properties.tags)``): the complete answer is validated against them."""
    grammar, _ = _convert(schema, param, "")
    return list(grammar.validated)


# --- Patterns -------------------------------------------------------------------------------------------


@dataclass
class _Node:
    """A parsed regular expression: its GBNF expression, whether it can match nothing, and its size once
    every repeat is spelled out."""

    expression: str
    nullable: bool
    size: int


# What a pattern's character means inside a JSON string: printable characters stand for themselves, a quote
# or a backslash is written escaped, a control character as its JSON escape.
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " \t\n\r\f\v"}
# A pattern's "any character": everything a JSON string holds unescaped.
_ANY = '[^"\\\\\\x00-\\x1F]'


def _json_char(ch: str) -> str:
    encoded = _JSON_ESCAPES.get(ch)
    if encoded is None and ord(ch) < 0x20:
        encoded = f"\\u{ord(ch):04x}"
    return literal(encoded or ch)


def _class_char(ch: str) -> str:
    if ch in "]\\^-[":
        return "\\" + ch
    if ord(ch) < 0x20 or ch == "\x7f":
        return f"\\x{ord(ch):02X}"
    return ch


class _PatternParser:
    def __init__(self, pattern: str, grammar: _Grammar, where: str) -> None:
        self.text = pattern
        self.pos = 0
        self.g = grammar
        self.where = where

    def fail(self, what: str, why: str) -> UnsupportedParameterError:
        return _refuse(self.g.param, f"the pattern {self.text[:60]!r} uses {what}", self.where, why)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at(self, chars: str) -> bool:
        """Whether the next character is one of ``chars`` (never at the end)."""
        return self.pos < len(self.text) and self.text[self.pos] in chars

    def alternation(self) -> _Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        expressions = list(dict.fromkeys(b.expression for b in branches))
        return _Node(
            self.g.rule(" | ".join(expressions), "alt"),
            any(b.nullable for b in branches),
            sum(b.size for b in branches),
        )

    def sequence(self) -> _Node:
        parts: list[_Node] = []
        while self.peek() and self.peek() not in "|)":
            parts.append(self.quantified(self.atom()))
        if not parts:
            return _Node('""', True, 0)
        if len(parts) == 1:
            return parts[0]
        return _Node(
            self.g.rule(" ".join(p.expression for p in parts), "seq"),
            all(p.nullable for p in parts),
            sum(p.size for p in parts),
        )

    def atom(self) -> _Node:
        ch = self.peek()
        self.pos += 1
        if ch == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self.text.startswith(("?P<", "?<"), self.pos) and not self.text.startswith(
                ("?<=", "?<!"), self.pos
            ):
                end = self.text.find(">", self.pos)
                if end < 0:
                    raise self.fail("an unfinished group name", "is not a regular expression")
                self.pos = end + 1
            elif self.peek() == "?":
                raise self.fail("a lookaround, flag or other (?...) group", "which a grammar cannot express")
            inner = self.alternation()
            if self.peek() != ")":
                raise self.fail("an unbalanced parenthesis", "is not a regular expression")
            self.pos += 1
            return _Node(
                self.g.rule(inner.expression, "group") if " " in inner.expression else inner.expression,
                inner.nullable,
                inner.size,
            )
        if ch == "[":
            return self.char_class()
        if ch == ".":
            return _Node(_ANY, False, 1)
        if ch == "\\":
            return self.escape()
        if ch in "^$":
            raise self.fail(f"{ch!r} inside the pattern", "(anchors are supported only at its start and end)")
        if ch in "*+?":
            raise self.fail(f"a {ch!r} with nothing to repeat", "is not a regular expression")
        return _Node(_json_char(ch), False, 1)

    def escape(self) -> _Node:
        ch = self.peek()
        if not ch:
            raise self.fail("a trailing backslash", "is not a regular expression")
        self.pos += 1
        if ch in _CLASS_ESCAPES:
            return self.class_node(
                list(_CLASS_ESCAPES[ch]) if ch == "s" else _expand(_CLASS_ESCAPES[ch]), False
            )
        if ch in "DWS":
            return self.class_node(_expand(_CLASS_ESCAPES[ch.lower()]), True)
        if ch.isdigit() or ch in "bBAZzkpP":
            raise self.fail(
                f"\\{ch}", "(back-references and word boundaries cannot be expressed in a grammar)"
            )
        plain = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
        if ch in plain:
            return _Node(_json_char(plain[ch]), False, 1)
        if ch in "xu":
            width = 2 if ch == "x" else 4
            digits = self.text[self.pos : self.pos + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"\\{ch} without {width} hex digits", "is not a regular expression")
            self.pos += width
            return _Node(_json_char(chr(int(digits, 16))), False, 1)
        return _Node(_json_char(ch), False, 1)

    def char_class(self) -> _Node:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        members: list[tuple[str, str]] = []
        first = True
        while True:
            ch = self.peek()
            if not ch:
                raise self.fail("an unfinished [...] class", "is not a regular expression")
            if ch == "]" and not first:
                self.pos += 1
                break
            first = False
            self.pos += 1
            if ch == "\\":
                esc = self.peek()
                self.pos += 1
                if esc in _CLASS_ESCAPES and esc != "s":
                    members += [(a, b) for a, b in _ranges(_CLASS_ESCAPES[esc])]
                    continue
                if esc == "s":
                    members += [(c, c) for c in _CLASS_ESCAPES["s"]]
                    continue
                if not esc or esc in "DWS":
                    raise self.fail(f"\\{esc} inside [...]", "is not supported")
                ch = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}.get(esc, esc)
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                end = self.peek()
                self.pos += 1
                if end == "\\":
                    end = self.peek()
                    self.pos += 1
                if end < ch:
                    raise self.fail(f"the range {ch}-{end}", "is out of order")
                members.append((ch, end))
            else:
                members.append((ch, ch))
        return self.class_node_ranges(members, negated)

    def class_node(self, chars: list[str], negated: bool) -> _Node:
        return self.class_node_ranges([(c, c) for c in chars], negated)

    def class_node_ranges(self, members: list[tuple[str, str]], negated: bool) -> _Node:
        """A character class of the pattern as JSON text: a negated class never produces a quote, a
        backslash or a control character (a subset of what it allows, so every answer still matches)."""
        if negated:
            listed = "".join(
                _class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in members
            )
            return _Node(f'[^{listed}"\\\\\\x00-\\x1F]', False, 1)
        plain: list[str] = []
        escaped: list[str] = []
        for a, b in members:
            # The characters a JSON string holds raw go in one class; the others are written escaped.
            for special in sorted(set(_JSON_ESCAPES) | {chr(c) for c in range(0x20)}):
                if a <= special <= b:
                    escaped.append(_json_char(special))
            low, high = max(a, " "), b
            if low > high:
                continue
            segments = _split_range(low, high)
            plain += [_class_char(x) if x == y else f"{_class_char(x)}-{_class_char(y)}" for x, y in segments]
        options = ([f"[{''.join(plain)}]"] if plain else []) + list(dict.fromkeys(escaped))
        if not options:
            raise self.fail("an empty character class", "matches nothing")
        expression = options[0] if len(options) == 1 else self.g.rule(" | ".join(options), "class")
        return _Node(expression, False, 1)

    def quantified(self, node: _Node) -> _Node:
        ch = self.peek()
        bounds: tuple[int, int | None] | None = None
        if self.at("*+?"):
            self.pos += 1
            bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        elif ch == "{":
            close = self.text.find("}", self.pos)
            inside = self.text[self.pos + 1 : close] if close > 0 else ""
            low_text, comma, high_text = inside.partition(",")
            if low_text.strip().isdigit() and (not high_text.strip() or high_text.strip().isdigit()):
                self.pos = close + 1
                low = int(low_text)
                high = (None if not high_text.strip() else int(high_text)) if comma else low
                if high is not None and high < low:
                    raise self.fail(f"{{{inside}}}", "has its bounds out of order")
                bounds = (low, high)
        if bounds is None:
            return node
        if self.at("?+"):
            self.pos += 1  # lazy or possessive: the same strings match
        low, high = bounds
        if node.nullable and (high is None or high > 1):
            shown = self.text[:60]
            raise self.fail(
                "a repeat of a part that can match nothing",
                f"makes llama.cpp track every way to split the text at each step ({shown!r}); "
                "write the optional part's repeat directly, for example a{0,4096} for (a?){4096}",
            )
        size = node.size * max(low, high if high is not None else low + 1, 1)
        if size > MAX_PATTERN_SIZE:
            raise self.fail(
                f"repeats that expand to {size} characters",
                f"(at most {MAX_PATTERN_SIZE}); nested repeats multiply",
            )
        return _Node(self.g.repeat(_wrap(node.expression, self.g), low, high), low == 0, size)


def _wrap(expression: str, grammar: _Grammar) -> str:
    return grammar.rule(expression, "item") if " " in expression else expression


def _expand(spec: str) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(spec):
        if index + 2 < len(spec) and spec[index + 1] == "-":
            out += [chr(c) for c in range(ord(spec[index]), ord(spec[index + 2]) + 1)]
            index += 3
        else:
            out.append(spec[index])
            index += 1
    return out


def _ranges(spec: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    index = 0
    while index < len(spec):
        if index + 2 < len(spec) and spec[index + 1] == "-":
            out.append((spec[index], spec[index + 2]))
            index += 3
        else:
            out.append((spec[index], spec[index]))
            index += 1
    return out


def _split_range(low: str, high: str) -> list[tuple[str, str]]:
    """``low``-``high`` without the quote and the backslash (written escaped instead)."""
    out: list[tuple[str, str]] = []
    start = ord(low)
    for cut in (ord('"'), ord("\\")):
        if start <= cut <= ord(high):
            if start < cut:
                out.append((chr(start), chr(cut - 1)))
            start = cut + 1
    if start <= ord(high):
        out.append((chr(start), high))
    return out


_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")


def pattern_needs_validation(pattern: str) -> str | None:
    """Why ``pattern`` can be validated but not generated (a lookaround, a back-reference, a word boundary,
    an inline flag), or None when :func:`pattern_grammar` can express it."""
    index, in_class = 0, False
    while index < len(pattern):
        ch = pattern[index]
        if ch == "\\":
            escaped = pattern[index + 1 : index + 2]
            if not in_class and escaped and (escaped.isdigit() or escaped in "bBAZzkpP"):
                return f"\\{escaped}, which a grammar cannot express"
            index += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            index += 1 + (pattern[index + 1 : index + 2] == "^")
            index += pattern[index : index + 1] == "]"  # a "]" first in a class is one of its members
            continue
        elif pattern.startswith(_LOOKAROUNDS, index):
            return "a lookaround, which a grammar cannot express"
        elif pattern.startswith("(?", index) and pattern[index + 2 : index + 3] in set("aiLmsux-"):
            return "an inline flag, which the grammar does not read"
        index += 1
    return None


def pattern_grammar(pattern: str, grammar: Any, where: str) -> str:
    """The GBNF expression for the JSON-string content of strings that match ``pattern`` (an ECMA-style
    regular expression; unanchored ends match anything, as JSON Schema's ``pattern`` does)."""
    text = pattern
    anchored_start = text.startswith("^")
    anchored_end = text.endswith("$") and not text.endswith("\\$")
    body = text[1 if anchored_start else 0 : len(text) - 1 if anchored_end else len(text)]
    parser = _PatternParser(body, grammar, where)
    parser.text = body
    node = parser.alternation()
    if parser.pos != len(body):
        raise parser.fail("an unbalanced parenthesis", "is not a regular expression")
    if node.size > MAX_PATTERN_SIZE:
        raise parser.fail(f"parts that expand to {node.size} characters", f"(at most {MAX_PATTERN_SIZE})")
    anything = grammar.base("char")
    parts = [grammar.repeat(anything, 0, None)] if not anchored_start else []
    parts.append(_wrap(node.expression, grammar))
    if not anchored_end:
        parts.append(grammar.repeat(anything, 0, None))
    return " ".join(parts)


__all__ = [
    "FORMATS",
    "VALIDATED_KEYWORDS",
    "json_literal",
    "literal",
    "pattern_grammar",
    "pattern_needs_validation",
    "resolve_pointer",
    "schema_grammar",
    "unenforced",
]
