"""A request's schema compiled once by llguidance: what is served, what the constraint takes, what is
validated on the finished answer (in the draft the schema declares), and the cache that makes it one
compile. The constraint is driven byte by byte through llguidance's matcher, as the decode loop drives it
token by token."""

import contextlib
import json
import multiprocessing
import random
import re
import socket
import time

import llguidance
import numpy as np
import pytest
from jsonschema import Draft202012Validator, validators

from snapllm.engine.constraint import LIMITS
from snapllm.errors import InvalidRequestError, SchemaValidationFailedError, UnsupportedParameterError
from snapllm.protocol.constraints import compiled_schema
from snapllm.protocol.constraints.compiled_schema import (
    CACHE_SIZE,
    COMPILATIONS,
    MAX_INDENT,
    MAX_SCHEMA_CHARS,
    PARSER_LIMITS,
    byte_tokenizer,
    clear_cache,
    compile_schema,
    parser_limits,
)
from snapllm_dev.bench.schemas import SPACINGS, Constraint
from snapllm_dev.testmodels.families import QWEN3_TOKENIZER
from tests.support.hostile_schemas import HOSTILE

TOKENIZER = byte_tokenizer()


def takes(schema, text: str) -> bool:
    """Whether the constraint of ``schema`` lets ``text`` be generated, exactly as written."""
    constraint = Constraint(compile_schema(schema, param="response_format"), TOKENIZER)
    matcher = constraint._matcher()
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


# --- What is served -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"a": {"type": "string"}},
        },
        {"self": {"vendor": "com.acme", "name": "event", "format": "jsonschema"}, "type": "object"},
        {
            "id": "http://example.test/s#",
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "string",
        },
        {"type": "string", "example": "x", "readonly": True, "_format": "uri", "_uniqueItems": True},
    ],
)
def test_keywords_json_schema_does_not_define_are_annotations(schema):
    compiled = compile_schema(schema, param="response_format")
    assert compiled.validated == ()
    assert takes(schema, '"x"' if schema["type"] == "string" else "{}")


@pytest.mark.parametrize("name", ["int32", "int64", "path", "url", "idn-email"])
def test_a_format_without_a_grammar_is_a_plain_string_validated_afterwards(name):
    compiled = compile_schema({"type": "string", "format": name}, param="response_format")
    assert compiled.validated == (f"format {name!r} (at the root)",)
    assert takes({"type": "string", "format": name}, '"anything"')


def test_a_format_jsonschema_checks_is_caught_on_the_answer():
    compiled = compile_schema({"type": "string", "format": "idn-email"}, param="response_format")
    assert compiled.violations('"someone@example.test"') == []
    assert compiled.violations('"no at sign"')


@pytest.mark.parametrize("keyword", ["maxLength", "maxItems"])
def test_counts_over_4096_are_served(keyword):
    schema = {"type": "string" if keyword == "maxLength" else "array", keyword: 100_000}
    compile_schema(schema, param="response_format")
    assert takes(
        schema, '"' + "a" * 5000 + '"' if keyword == "maxLength" else "[" + ",".join(["1"] * 5000) + "]"
    )


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "integer", "minimum": "0"}, "not valid JSON Schema: '0' is not of type 'number'"),
        ({"type": "thing"}, "not valid JSON Schema"),
        ({"type": "array", "minItems": -1}, "-1 is less than the minimum of 0"),
        ({"not": {"type": "string", "pattern": "(("}}, "'((' is not a 'regex'"),
        ({"patternProperties": {"((": {}}}, "'((' is not a 'regex'"),
        ({"$ref": "#/$defs/Missing"}, "/$defs/Missing"),
        ({"$ref": "https://example.test/s.json"}, "https://example.test/s.json"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "Unsatisfiable schema"),
    ],
)
def test_what_cannot_be_served_is_a_400_naming_why(schema, named):
    with pytest.raises(UnsupportedParameterError) as caught:
        compile_schema(schema, param="response_format")
    assert named in caught.value.message and caught.value.param == "response_format"


def test_a_schema_over_the_size_limit_is_refused_before_any_compile():
    clear_cache()
    before = COMPILATIONS.count
    big = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_CHARS // 10)},
    }
    with pytest.raises(InvalidRequestError, match="characters as compact JSON"):
        compile_schema(big, param="tools.0.function.parameters")
    assert COMPILATIONS.count == before


def test_a_compile_past_the_timeout_is_refused_and_served_once_it_is_done(monkeypatch):
    # The bound is the compile's time, not the schema's size: 143,000 characters of properties compile.
    clear_cache()
    large = {"type": "object", "properties": {f"field_{i:05d}": {"type": "integer"} for i in range(4800)}}
    assert len(json.dumps(large, separators=(",", ":"))) > 140_000
    monkeypatch.setattr(compiled_schema, "COMPILE_TIMEOUT_S", 0.001)
    with pytest.raises(InvalidRequestError, match=r"did not compile within 0\.001 s") as caught:
        compile_schema(large, param="response_format")
    assert caught.value.param == "response_format"
    # The compile ran on to its end, and was kept: the same schema sent again is served at once.
    monkeypatch.setattr(compiled_schema, "COMPILE_TIMEOUT_S", 60.0)
    compiled = compile_schema(large, param="response_format")
    assert not compiled.violations('{"field_00007": 7}')
    monkeypatch.setattr(compiled_schema, "COMPILE_TIMEOUT_S", 0.001)
    assert compile_schema(large, param="response_format") is compiled


# --- Whitespace ---------------------------------------------------------------------------------------------

PLACE = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "array"}}}


@pytest.mark.parametrize(
    "text",
    [
        '{"city":"Paris","days":[1,2]}',
        '{"city": "Paris", "days": [1, 2]}',
        json.dumps({"city": "Paris", "days": [1, 2]}, indent=2),
        json.dumps({"city": "Paris", "days": [1, 2]}, indent="\t"),
    ],
)
def test_json_may_be_compact_spaced_or_indented(text):
    assert takes(PLACE, text)


@pytest.mark.parametrize(
    "text",
    [
        '{"city":  "Paris"}',
        '{"city":"Paris",\n' + " " * (MAX_INDENT + 1) + '"days":[]}',
        '{"city":"Paris"}\n\n',
        ' {"city":"Paris"}',
    ],
)
def test_whitespace_between_tokens_is_bounded(text):
    assert not takes(PLACE, text)


def test_a_requests_own_compiler_options_are_replaced():
    schema = {**PLACE, "x-guidance": {"whitespace_flexible": True, "whitespace_pattern": " *"}}
    compiled = compile_schema(schema, param="response_format")
    assert '"x-guidance": {"whitespace_pattern"' in compiled.lark()
    assert not takes(schema, '{"city":' + " " * 40 + '"Paris"}')


# --- Validated on the answer, one keyword at a time ---------------------------------------------------------

# (schema, an answer the constraint may let through, whose validation must fail)
VALIDATED = {
    "uniqueItems": ({"type": "array", "uniqueItems": True}, '["a","a"]'),
    "contains": ({"type": "array", "contains": {"const": 1}}, "[2]"),
    "minContains": ({"type": "array", "contains": {"const": 1}, "minContains": 2}, "[1,2]"),
    "maxContains": ({"type": "array", "contains": {"const": 1}, "maxContains": 1}, "[1,1]"),
    "unevaluatedItems": ({"prefixItems": [{"type": "integer"}], "unevaluatedItems": False}, "[1,2]"),
    "additionalItems": ({"type": "array", "items": [{"type": "integer"}], "additionalItems": False}, "[1,2]"),
    "minProperties": ({"type": "object", "minProperties": 2}, '{"a":1}'),
    "maxProperties": ({"type": "object", "maxProperties": 1}, '{"a":1,"b":2}'),
    "patternProperties": (
        {"type": "object", "patternProperties": {"^n_": {"type": "integer"}}},
        '{"n_a":"x"}',
    ),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 2}}, '{"abc":1}'),
    "unevaluatedProperties": (
        {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
        '{"a":1,"b":2}',
    ),
    "dependentRequired": ({"type": "object", "dependentRequired": {"a": ["b"]}}, '{"a":1}'),
    "dependentSchemas": (
        {"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}},
        '{"a":1}',
    ),
    "dependencies": ({"type": "object", "dependencies": {"a": ["b"]}}, '{"a":1}'),
    "not": ({"type": "integer", "not": {"const": 3}}, "3"),
    "if/then/else": (
        {
            "type": "object",
            "if": {"required": ["a"]},
            "then": {"required": ["b"]},
            "else": {"required": ["c"]},
        },
        '{"a":1}',
    ),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, "3"),
    "pattern (lookaround)": ({"type": "string", "pattern": "^(?=.*\\d)[a-z0-9]+$"}, '"abc"'),
    "pattern (backreference)": ({"type": "string", "pattern": "^(a|b)\\1$"}, '"ab"'),
    "format": ({"type": "string", "format": "idn-email"}, '"nobody"'),
    "multipleOf": ({"type": "number", "multipleOf": 0.01}, "0.075"),
    "const": ({"const": {"a": [1, 2]}}, '{"a":[2,1]}'),
}


@pytest.mark.parametrize("keyword", list(VALIDATED))
def test_every_validated_keyword_catches_an_invalid_answer(keyword):
    schema, invalid = VALIDATED[keyword]
    compiled = compile_schema(schema, param="response_format")
    assert compiled.violations(invalid), f"{keyword}: {invalid} passed"
    with pytest.raises(SchemaValidationFailedError) as caught:
        compiled.check_answer(invalid, param="response_format")
    assert caught.value.status_code == 422 and invalid[:20] in caught.value.message


def test_what_llguidance_does_not_enforce_is_listed_with_its_place():
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "code": {"type": "string", "pattern": "^(?=A)[A-Z]{3}$"},
            "size": {"type": "string", "format": "int32"},
        },
        "not": {"required": ["code"]},
    }
    validated = compile_schema(schema, param="response_format").validated
    assert set(validated) == {
        "pattern '^(?=A)[A-Z]{3}$'",
        "uniqueItems (at properties.tags)",
        "not (at the root)",
        "format 'int32' (at properties.size)",
    }
    with pytest.raises(SchemaValidationFailedError, match=r"not enforced by the grammar: .*uniqueItems"):
        compile_schema(schema, param="response_format").check_answer('{"tags":["a","a"]}', param="p")


# --- The five defects ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "good", "bad"), [("^[a^b]+$", '"a^b"', '"a^c"'), ("^[^@^x]+$", '"abc"', '"a^"')]
)
def test_a_caret_inside_a_character_class_is_served_and_enforced(pattern, good, bad):
    schema = {"type": "string", "pattern": pattern}
    compiled = compile_schema(schema, param="response_format")
    assert compiled.validated == ()
    assert takes(schema, good) and not takes(schema, bad)


def test_dependencies_and_additional_items_are_validated_without_a_declared_draft():
    dependencies = compile_schema({"type": "object", "dependencies": {"a": ["b"]}}, param="p")
    assert dependencies.violations('{"a":1}') and not dependencies.violations('{"a":1,"b":2}')
    tuples = {"type": "array", "items": [{"type": "integer"}], "additionalItems": False}
    assert compile_schema(tuples, param="p").violations("[1,2]")
    assert takes(tuples, "[1]") and not takes(tuples, "[1,2]")


def test_pattern_properties_beside_no_additional_properties_are_generated():
    schema = {
        "type": "object",
        "patternProperties": {"^x_": {"type": "integer"}},
        "additionalProperties": False,
        "minProperties": 1,
    }
    compiled = compile_schema(schema, param="response_format")
    assert takes(schema, '{"x_a":1}') and not takes(schema, '{"y":1}')
    assert compiled.violations('{"x_a":1}') == [] and compiled.violations("{}")


def test_a_cycle_through_a_ref_with_sibling_keys_is_served_and_its_answer_validated():
    # llguidance refuses this cycle ("circular references with sibling keys"): the definition it names is
    # generated as any JSON value, and the answer is still validated against the whole schema.
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node", "required": ["name"]}},
                },
                "required": ["children"],
            }
        },
        "$ref": "#/$defs/node",
    }
    compiled = compile_schema(schema, param="response_format")
    assert any("$defs.node" in what and "cycle" in what for what in compiled.validated)
    good = '{"children":[{"name":"a","children":[]}]}'
    assert takes(schema, good) and compiled.violations(good) == []
    assert compiled.violations('{"children":[{"children":[]}]}')  # a child without its name
    with pytest.raises(SchemaValidationFailedError):
        compiled.check_answer('{"name":"root"}', param="response_format")


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        (
            {"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "$ref": "#/$defs/n"},
            "#/$defs/n",
        ),
        ({"oneOf": [{"type": "null"}, {"not": {"$ref": "#"}}]}, "#"),
        # Inside a property, through a chain of two definitions.
        (
            {
                "properties": {"a": {"$ref": "#/definitions/x"}},
                "definitions": {
                    "x": {"allOf": [{"$ref": "#/definitions/y"}]},
                    "y": {"if": {"$ref": "#/definitions/x"}},
                },
            },
            "#/definitions/x",
        ),
    ],
    ids=["anyOf", "not-root", "chain-in-a-property"],
)
def test_a_schema_that_reaches_itself_before_any_property_or_item_is_refused(schema, place):
    # Validating such a schema would never end (jsonschema recursed until its limit and a valid null got a
    # 422): it is refused before anything compiles, naming where.
    with pytest.raises(UnsupportedParameterError, match=re.escape(f"refers to itself at '{place}'")):
        compile_schema(schema, param="response_format")


def test_recursion_through_a_property_or_an_item_is_served():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    listed = {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref": "#"}}}]}
    for schema, answer in ((tree, '{"kids":[{"kids":[]}]}'), (listed, '{"next":{"next":null}}')):
        assert compile_schema(schema, param="response_format").violations(answer) == []


def test_overlapping_pattern_properties_are_served_and_their_answer_validated():
    # llguidance will not combine property-name patterns that overlap: that object takes any property
    # while generating, and its patterns and additionalProperties are validated on the answer.
    schema = {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "integer"}},
        "additionalProperties": False,
    }
    compiled = compile_schema(schema, param="response_format")
    assert any("patternProperties" in what for what in compiled.validated)
    assert takes(schema, '{"ab":1}') and compiled.violations('{"ab":1}') == []
    assert compiled.violations('{"ab":"x"}') and compiled.violations('{"z":1}')


def test_the_declared_draft_judges_the_answer_and_shapes_the_constraint():
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    compiled = compile_schema(draft4, param="p")
    assert compiled.violations("5") and not compiled.violations("4.5")
    assert takes(draft4, "4.5") and not takes(draft4, "5")
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "dependencies": {"a": {"required": ["b"]}},
    }
    assert compile_schema(draft7, param="p").violations('{"a":1}')
    # 2020-12 reads a draft-04 schema's boolean as the wrong type: the declared draft is what counts.
    with pytest.raises(UnsupportedParameterError, match="not valid JSON Schema"):
        compile_schema({k: v for k, v in draft4.items() if k != "$schema"}, param="p")


def test_a_pattern_and_lengths_hold_together():
    # pydantic: constr(min_length=3, max_length=8, pattern=r"^[A-Z0-9]+$")
    schema = {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[A-Z0-9]+$"}
    assert compile_schema(schema, param="response_format").validated == ()
    assert not takes(schema, '"M"') and takes(schema, '"M4X"') and not takes(schema, '"ABCDEFGHI"')


# --- One compile -------------------------------------------------------------------------------------------


def test_a_schema_is_compiled_once_and_the_cache_is_bounded():
    clear_cache()
    before = COMPILATIONS.count
    first = compile_schema(PLACE, param="response_format")
    assert compile_schema(json.loads(json.dumps(PLACE)), param="tools.0.function.parameters") is first
    assert COMPILATIONS.count == before + 1
    # Property order is part of what is generated: another order is another schema.
    reordered = {"type": "object", "properties": dict(reversed(PLACE["properties"].items()))}
    assert compile_schema(reordered, param="p") is not first
    for n in range(CACHE_SIZE):
        compile_schema({"const": n}, param="p")
    assert len(compiled_schema._CACHE) == CACHE_SIZE
    compile_schema(PLACE, param="p")
    assert COMPILATIONS.count == before + 2 + CACHE_SIZE + 1


def test_a_refusal_is_remembered_and_names_each_requests_parameter():
    clear_cache()
    for param in ("response_format", "tools.3.function.parameters"):
        with pytest.raises(UnsupportedParameterError) as caught:
            compile_schema({"$ref": "#/$defs/Missing"}, param=param)
        assert caught.value.param == param and caught.value.message.startswith(param)


def test_the_bench_spacings_are_what_json_dumps_writes():
    value = {"a": [1, {"b": None}], "c": {}}
    assert json.dumps(value, separators=(SPACINGS["compact"].item, SPACINGS["compact"].key)) == json.dumps(
        value, separators=(",", ":")
    )
    assert Constraint(compile_schema({"type": "object"}, param="p"), TOKENIZER).accepts(
        value, SPACINGS["indent=2"]
    )


# --- Bounded cost: the hostile-schema table ----------------------------------------------------------------

#: What compiling one hostile schema may take here (a busy 2-core machine; llguidance's fuel bounds it).
COMPILE_BOUND_S = 3.0
#: What one token's mask may take over a 151k-token vocabulary (llguidance's step fuel bounds its work).
MASK_BOUND_S = 0.25


@pytest.fixture(scope="module")
def vocabulary():
    """llguidance's view of a real vocabulary: Qwen3's 151,669 tokens (the test models' tokenizer)."""
    return llguidance.LLTokenizer(str(QWEN3_TOKENIZER.tokenizer_json))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_schema_compiles_and_masks_within_its_bound_or_is_refused_naming_why(name, vocabulary):
    schema, refusal = HOSTILE[name]
    clear_cache()
    started = time.perf_counter()
    if refusal is not None:
        with pytest.raises(UnsupportedParameterError) as caught:
            compile_schema(schema, param="response_format")
        assert refusal in caught.value.message
        assert time.perf_counter() - started < COMPILE_BOUND_S
        return
    compiled = compile_schema(schema, param="response_format")
    assert time.perf_counter() - started < COMPILE_BOUND_S
    matcher = llguidance.LLMatcher(vocabulary, compiled.grammar, limits=parser_limits(), log_level=0)
    rng = random.Random(0)
    for _ in range(32):  # a random walk through what the constraint allows
        if matcher.is_stopped():
            break
        started = time.perf_counter()
        mask = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        assert time.perf_counter() - started < MASK_BOUND_S, name
        assert not matcher.is_error(), matcher.get_error()
        allowed = np.flatnonzero(mask[: vocabulary.vocab_size])
        allowed = allowed[allowed != vocabulary.eos_token]
        if not len(allowed):
            break
        assert matcher.consume_token(int(rng.choice(allowed)))


def test_thousands_of_nested_refs_compile_on_a_stack_that_holds_them():
    """3,000 nested ``$ref``s overflow a usual thread stack inside llguidance (the process died)."""
    depth = 3000
    defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(depth)}
    schema = {"$ref": "#/$defs/d0", "$defs": {**defs, f"d{depth}": {"type": "null"}}}
    compiled = compile_schema(schema, param="response_format")
    assert compiled.violations("[[[1]]]") and not compiled.violations("[[[[]]]]")


def test_the_compile_runs_under_the_engines_limits():
    for name, value in PARSER_LIMITS.items():
        assert getattr(LIMITS, name) == value, name


def test_a_forked_process_compiles_on_its_own_thread():
    """The local stack restores a snapshot by forking: the child must not wait on its parent's thread."""
    compile_schema({"const": "before the fork"}, param="p")  # the compile thread is running
    context = multiprocessing.get_context("fork")
    child = context.Process(target=compile_schema, args=({"const": "after the fork"},), kwargs={"param": "p"})
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0


def test_every_format_jsonschema_checks_is_checked_whatever_the_draft():
    """A draft-04 schema's ``iri`` (a format of later drafts) was let through: draft-04's checker has none."""
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string", "format": "iri"}
    compiled = compile_schema(schema, param="response_format")
    assert compiled.violations('"not-an-iri"') and not compiled.violations('"https://example.test/ü"')


def test_a_schema_naming_a_metaschema_by_url_never_makes_the_checker_fetch_it():
    # jsonschema-rs fetches a metaschema it does not hold: a request's $schema must not make the function
    # connect anywhere. A real listener stands where the schema points, and sees no connection.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.5)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/schema#"
        clear_cache()
        with contextlib.suppress(UnsupportedParameterError):  # llguidance does not read it either
            compile_schema({"$schema": url, "type": "object"}, param="response_format")
        with pytest.raises(TimeoutError):
            listener.accept()


@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "required": []},
        {"patternProperties": {"[": {}}},
        {"type": "integer", "maximum": 10**30},
    ],
    ids=["draft-04-empty-required", "unreadable-pattern-name", "huge-bound"],
)
def test_the_fast_metaschema_check_refuses_what_jsonschema_refuses(schema):
    # jsonschema-rs answers first; where it does not hold the draft, leaves formats unchecked or cannot read
    # the document, jsonschema judges, so the two refuse alike.
    draft = validators.validator_for(schema, default=Draft202012Validator)
    try:
        draft.check_schema(schema)
        expected_refusal = False
    except Exception:
        expected_refusal = True
    clear_cache()
    try:
        compile_schema(schema, param="response_format")
        refused = False
    except UnsupportedParameterError:
        refused = True
    assert refused is expected_refusal


@pytest.mark.parametrize("declared", [["a"], 5, None, {"$ref": "#"}])
def test_a_schema_whose_schema_keyword_is_not_a_string_is_a_400(declared):
    # It named no draft, and jsonschema's lookup of it raised (a TypeError, an AttributeError): a 5xx.
    with pytest.raises(UnsupportedParameterError, match=r"\$schema must be a string"):
        compile_schema({"$schema": declared, "type": "object"}, param="response_format")
