"""Every field of the installed ``openai`` package's request types has a decision, and each decision holds."""

from pathlib import Path

import pytest
from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params

from snapllm.errors import InvalidRequestError, UnsupportedParameterError
from snapllm.protocol.http.fields import FIELD_DECISIONS, field_table, ignored_fields_header
from snapllm.protocol.requests import parse_request
from snapllm.protocol.responses.responses_api import parse_responses_request

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
CHAT = {"messages": [{"role": "user", "content": "Hi"}]}
RESPONSE = {"input": "Hi"}


def _fields(*typed_dicts) -> set[str]:
    names: set[str] = set()
    for typed in typed_dicts:
        for klass in typed.__mro__:
            names |= set(getattr(klass, "__annotations__", {}))
    return names


@pytest.mark.parametrize(
    ("endpoint", "fields"),
    [
        (
            "chat",
            _fields(
                chat_params.CompletionCreateParamsStreaming, chat_params.CompletionCreateParamsNonStreaming
            ),
        ),
        (
            "completion",
            _fields(
                completion_params.CompletionCreateParamsStreaming,
                completion_params.CompletionCreateParamsNonStreaming,
            ),
        ),
        (
            "responses",
            _fields(
                responses_params.ResponseCreateParamsStreaming,
                responses_params.ResponseCreateParamsNonStreaming,
            ),
        ),
    ],
)
def test_every_field_of_the_openai_request_types_has_a_decision(endpoint, fields):
    assert fields, "the openai package's request types were not found"
    missing = sorted(fields - set(FIELD_DECISIONS[endpoint]))
    assert not missing, f"fields of the installed openai package with no decision for {endpoint}: {missing}"


def test_the_docs_hold_the_field_table_as_the_code_decides_it():
    assert field_table() in API_PAGE.read_text(), (
        "docs/api.md: paste snapllm.protocol.http.fields.field_table()"
    )


def test_ignored_fields_are_accepted():
    samples = {
        "reasoning_effort": "low",
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "verbosity": "low",
        "id_slot": 0,
    }
    request = parse_request({**CHAT, **samples, "modalities": ["text"], "store": False})
    assert request.messages[0].text() == "Hi" and request.ignored_fields == ()


@pytest.mark.parametrize("field", [f for f, d in FIELD_DECISIONS["chat"].items() if d.kind == "refused"])
def test_refused_fields_say_why(field):
    with pytest.raises(UnsupportedParameterError) as caught:
        parse_request({**CHAT, field: {}})
    assert caught.value.param == field and caught.value.code == "unsupported_parameter"
    assert FIELD_DECISIONS["chat"][field].reason in caught.value.message


def test_unknown_fields_are_ignored_and_named():
    request = parse_request({**CHAT, "reasoning_efort": "low", "top_kk": 3, "temperature": 0.0})
    assert request.ignored_fields == ("reasoning_efort", "top_kk") and request.temperature == 0.0
    # Known fields keep their checks, and so does what an unknown one holds.
    with pytest.raises(InvalidRequestError) as refused:
        parse_request({**CHAT, "extra": "\ud800"})
    assert refused.value.param == "extra"


def test_the_ignored_fields_header_is_ascii_and_bounded():
    names = ["caf\u00e9", "a" * 100, *(f"f{i}" for i in range(30))]
    value = ignored_fields_header(names)
    assert value.isascii() and value.startswith("caf\\xe9, " + "a" * 64 + ", f0")
    assert value.endswith("and 12 more")


def test_ignored_responses_fields_are_accepted():
    samples = {
        "metadata": {"team": "a"},
        "user": "u",
        "safety_identifier": "s",
        "service_tier": "auto",
        "prompt_cache_key": "k",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {},
        "max_tool_calls": 3,
        "stream_options": {"include_obfuscation": False},
        "id_slot": 1,
        "priority": 0,
        "request_id": "r",
    }
    assert set(samples) == {f for f, d in FIELD_DECISIONS["responses"].items() if d.kind == "ignored"}
    request = parse_responses_request({**RESPONSE, **samples, "store": False, "truncation": "disabled"})
    assert request.chat.messages[0].text() == "Hi"


@pytest.mark.parametrize("field", [f for f, d in FIELD_DECISIONS["responses"].items() if d.kind == "refused"])
def test_refused_responses_fields_say_why(field):
    with pytest.raises(UnsupportedParameterError) as caught:
        parse_responses_request({**RESPONSE, field: "x"})
    assert caught.value.param == field and caught.value.code == "unsupported_parameter"
    assert FIELD_DECISIONS["responses"][field].reason in caught.value.message


def test_responses_unknown_fields_are_ignored_and_named():
    request = parse_responses_request({**RESPONSE, "max_output_token": 5})
    assert request.ignored_fields == ("max_output_token",) and request.max_output_tokens is None
