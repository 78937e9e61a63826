"""What a chat request is refused with when its chat template cannot render it, or when a field holds what
no template may get: each a 400 that names the request's field and says what is wrong with it, never
Python's or Jinja's own words (``Template.generate() got multiple values for argument 'self'``).

The templates here are written for these tests, each the smallest that does what real templates do (gpt-oss's
concatenates ``"// " + tool.description``; Hermes 3's reads ``tool.parameters``); the real ones run in
tests/integration/test_hostile_text.py.
"""

from __future__ import annotations

import json

import pytest

from snapllm.errors import InvalidRequestError
from snapllm.protocol.completions.chat import ChatRenderer
from snapllm.protocol.requests import TEMPLATE_LANGUAGE_NAMES, parse_request
from snapllm.protocol.responses.responses_api import parse_responses_request, responses_fields

PLAIN = "{% for m in messages %}[{{ m['role'] }}: {{ m['content'] }}]{% endfor %}"
HELLO = {"role": "user", "content": "Hello"}


def _render(template: str, body: dict) -> str:
    renderer = ChatRenderer(template, bos_token="<s>", eos_token="</s>", stop="</s>")
    request = parse_request(body)
    return renderer.render(request, request.chat_template_kwargs).prompt


def _refusal(template: str, body: dict) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as refused:
        _render(template, body)
    return refused.value


@pytest.mark.parametrize("name", ["self", "range", "namespace", "loop", "dict"])
def test_a_chat_template_kwargs_key_the_template_language_owns_is_refused_by_name(name):
    # 'self' once reached Jinja's Template.generate as a keyword, which answered with its own TypeError;
    # 'range' would replace the renderer's bounded range, 'namespace' the function templates keep state in.
    with pytest.raises(InvalidRequestError) as refused:
        parse_request({"messages": [HELLO], "chat_template_kwargs": {name: 1, "enable_thinking": False}})
    error = refused.value
    assert error.param == "chat_template_kwargs"
    assert error.message == (
        f"chat_template_kwargs: {name!r} is a name of the chat template language itself, not template "
        "variables: choose another name"
    )


def test_the_names_refused_cover_every_function_the_template_language_defines():
    renderer = ChatRenderer(PLAIN, bos_token="<s>", eos_token="</s>", stop="</s>")
    assert set(renderer._template.environment.globals) <= TEMPLATE_LANGUAGE_NAMES


def test_a_template_variable_of_any_other_name_reaches_the_template():
    template = "{{ generate }} {{ source }} {{ args }}" + PLAIN
    body = {"messages": [HELLO], "chat_template_kwargs": {"generate": "g", "source": "s", "args": "a"}}
    assert _render(template, body) == "g s a[user: Hello]"


def test_a_value_of_chat_template_kwargs_the_template_cannot_use_is_named():
    # As gpt-oss's template writes "Reasoning: " + reasoning_effort, "medium" when it is not given.
    template = "{% if reasoning_effort is not defined %}{% set reasoning_effort = 'medium' %}{% endif %}"
    template += "{{ 'Reasoning: ' + reasoning_effort }}" + PLAIN
    error = _refusal(template, {"messages": [HELLO], "chat_template_kwargs": {"reasoning_effort": 5}})
    assert error.param == "chat_template_kwargs"
    assert error.message.startswith(
        "chat_template_kwargs: the model's chat template cannot render with the value of 'reasoning_effort' "
    )
    assert _render(template, {"messages": [HELLO], "chat_template_kwargs": {"reasoning_effort": "low"}})


def test_a_refusal_the_template_raises_keeps_its_own_words_and_names_messages():
    template = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('Start with a system turn') }}"
    template += "{% endif %}"
    error = _refusal(template, {"messages": [HELLO], "chat_template_kwargs": {"x": 1}})
    assert error.param == "messages"
    assert error.message == "the model's chat template rejected the messages: Start with a system turn"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"name": "get_weather", "parameters": {"type": "object"}}, "tools.0.function.description"),
        ({"name": "get_weather", "description": "Weather."}, "tools.0.function.parameters"),
    ],
)
def test_a_tool_field_the_template_requires_is_named(tool, param):
    # As Hermes 3's tool-use template reads every tool's description and parameters, which OpenAI's API
    # leaves optional.
    template = "{% for t in tools %}{{ '// ' + t.function.description }}{{ t.function.parameters.type }}"
    template += "{% endfor %}"
    error = _refusal(
        template + PLAIN, {"messages": [HELLO], "tools": [{"type": "function", "function": tool}]}
    )
    assert error.param == param
    assert error.message == f"{param} is missing, and the model's chat template requires it in every tool"


def test_a_responses_tool_field_the_template_requires_is_named_in_the_responses_shape():
    template = "{% for t in tools %}{{ '// ' + t.function.description }}{% endfor %}" + PLAIN
    renderer = ChatRenderer(template, bos_token="<s>", eos_token="</s>", stop="</s>")
    request = parse_responses_request({"input": "Hi", "tools": [{"type": "function", "name": "f"}]})
    with pytest.raises(InvalidRequestError) as refused, responses_fields(request):
        renderer.render(request.chat)
    assert refused.value.param == "tools.0.description"


def test_text_a_template_writes_that_is_not_unicode_is_a_400_before_any_tokenizer():
    # A template can make a surrogate of its own from parts (Jinja reads "\ud83d" in a literal as one);
    # the request's own text is refused before, by the request models.
    template = '{{ "\\ud83d" ~ "\\ude00" }}' + PLAIN
    error = _refusal(template, {"messages": [HELLO]})
    assert error.param == "messages"
    assert "not valid Unicode" in error.message


@pytest.mark.parametrize(
    ("body", "param", "detail"),
    [
        ({"tools": [{"type": "function", "function": "f"}]}, "tools.0.function", "Input should be an object"),
        ({"tools": ["f"]}, "tools.0", "Input should be an object"),
        ({"tools": "f"}, "tools", "Input should be an array"),
        ({"metadata": ["a"]}, "metadata", "Input should be an object"),
        ({"chat_template_kwargs": [1]}, "chat_template_kwargs", "Input should be an object"),
    ],
)
def test_a_value_of_the_wrong_json_type_is_named_in_jsons_terms(body, param, detail):
    # Pydantic says "a valid dictionary or instance of FunctionDefinition": Python's and this package's names.
    with pytest.raises(InvalidRequestError) as refused:
        parse_request({"messages": [HELLO], **body})
    assert refused.value.param == param
    assert refused.value.message == f"{param}: {detail}"


def test_sent_back_arguments_whose_escapes_decode_to_a_lone_surrogate_are_named():
    arguments = json.dumps({"city": "Par\udc00is"})
    assert arguments.isascii()  # the body's own check sees nothing but ASCII
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    body = {
        "messages": [
            HELLO,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        ]
    }
    with pytest.raises(InvalidRequestError, match="unpaired surrogate") as refused:
        parse_request(body)
    assert refused.value.param == "messages.1.tool_calls.0.function.arguments"
    # A pair of escapes is one character, and an escaped backslash before "ud800" is no escape at all.
    for fine in (json.dumps({"city": "😀"}), json.dumps({"city": "\\ud800"})):
        call["function"]["arguments"] = fine
        assert parse_request(body).messages[1].tool_calls[0].function.arguments == fine
