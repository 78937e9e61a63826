"""Every field of the installed ``openai`` package's request types has a decision, and each decision holds."""

from pathlib import Path

import pytest
from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params

from snapllm.errors import InvalidRequestError, UnsupportedParameterError
from snapllm.protocol.fields import FIELD_DECISIONS, ignored_fields
from snapllm.protocol.requests import parse_request
from snapllm.protocol.responses_api import parse_responses_request

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


def test_ignored_fields_are_accepted_and_listed_in_the_docs():
    readme = API_PAGE.read_text()
    for field, found in ignored_fields().items():
        assert f"| `{field}` | {found.reason} |" in readme, field
    samples = {
        "reasoning_effort": "low",
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "verbosity": "low",
    }
    request = parse_request({**CHAT, **samples, "modalities": ["text"], "store": False})
    assert request.messages[0].text() == "Hi"


@pytest.mark.parametrize("field", [f for f, d in FIELD_DECISIONS["chat"].items() if d.kind == "refused"])
def test_refused_fields_say_why(field):
    with pytest.raises(UnsupportedParameterError) as caught:
        parse_request({**CHAT, field: {}})
    assert caught.value.param == field and caught.value.code == "unsupported_parameter"
    assert FIELD_DECISIONS["chat"][field].reason in caught.value.message


def test_typos_are_still_unrecognized():
    with pytest.raises(InvalidRequestError, match="unrecognized request argument: reasoning_efort"):
        parse_request({**CHAT, "reasoning_efort": "low"})


def test_ignored_responses_fields_are_accepted():
    samples = {
        "metadata": {"team": "a"},
        "user": "u",
        "safety_identifier": "s",
        "service_tier": "auto",
        "prompt_cache_key": "k",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {},
        "reasoning": {"effort": "low"},
        "max_tool_calls": 3,
        "stream_options": {"include_obfuscation": False},
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


def test_responses_typos_are_still_unrecognized():
    with pytest.raises(InvalidRequestError, match="unrecognized request argument: max_output_token"):
        parse_responses_request({**RESPONSE, "max_output_token": 5})
