"""The formats an answer is validated for: each one the grammar does not spell out is really checked, with the
checkers snapllm itself depends on (not the test tools' extras)."""

from __future__ import annotations

import pytest

from snapllm.protocol.constraints.compiled_schema import compile_schema
from snapllm.protocol.constraints.formats import FORMAT_CHECKER, as_uri

#: The formats JSON Schema 2020-12 defines (its Validation vocabulary, section 7.3).
DEFINED = (
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex",
)  # fmt: skip

#: A valid and an invalid string of each format the grammar leaves to validation.
EXAMPLES = {
    "idn-email": ("用户@例子.广告", "no at sign"),
    "idn-hostname": ("例子.测试", "a" * 64 + ".example"),
    "iri": ("https://example.test/ü?q=ö", "not-an-iri"),
    "iri-reference": ("../ü#frag", "a b"),
    "uri-reference": ("../x?y#z", "a b"),
    "uri-template": ("https://example.test/{user}/items{?page}", "https://example.test/{user"),
    "json-pointer": ("/a/b~1c", "a/b"),
    "relative-json-pointer": ("0/a", "/a"),
    "regex": ("^a+$", "(unclosed"),
}


@pytest.mark.parametrize("name", DEFINED)
def test_every_defined_format_is_spelled_out_by_the_grammar_or_checked_on_the_answer(name):
    compiled = compile_schema({"type": "string", "format": name}, param="response_format")
    assert not compiled.validated or name in FORMAT_CHECKER.checkers, name
    assert bool(compiled.validated) == (name in EXAMPLES), name


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_validated_format_catches_a_wrong_answer(name):
    good, bad = EXAMPLES[name]
    compiled = compile_schema({"type": "string", "format": name}, param="response_format")
    assert compiled.violations(f'"{good}"') == []
    assert compiled.violations(f'"{bad}"'), name


@pytest.mark.parametrize(
    ("iri", "uri"),
    [
        ("https://example.test/ü", "https://example.test/%C3%BC"),
        ("https://例子.测试/?q=\ue000", "https://%E4%BE%8B%E5%AD%90.%E6%B5%8B%E8%AF%95/?q=%EE%80%80"),
        ("https://example.test/\ue000", None),  # private use outside the query
        ("https://example.test/?q#\ue000", None),  # or in the fragment after it
        ("https://example.test/#a?\ue000", None),  # a "?" in the fragment starts no query
        ("https://example.test/\ufffe", None),  # a noncharacter
        ("https://example.test/\u0085", None),  # a C1 control
    ],
)
def test_an_iri_maps_to_a_uri_as_rfc_3987_says(iri, uri):
    assert as_uri(iri) == uri
