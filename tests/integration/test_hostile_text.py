"""Text that is not Unicode (a lone surrogate) in every string field of a request, through the request
models and the serving layer over real models: each is a 400 that names the field, never the tokenizer's
``UnicodeEncodeError`` (a 5xx).

A surrogate comes escaped in the body's JSON (``"\\ud800"``), or escaped twice: inside JSON text that the
server decodes again (a sent-back call's ``arguments``), which the body's own check reads as ASCII. Every
chat field, every Responses field, and the token routes' fields are tried, on the packaged model (SmolLM2,
whose template takes no tools: the generic tool format decodes the arguments) and on the gpt-oss test model
(random weights, its real template: the template decodes them). The hostile-input table sends one of each
class through every entry point.

Also here: a gpt-oss tool without a description (optional in OpenAI's API) is served, and gpt-oss's template
failing on a value of ``chat_template_kwargs`` names that field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.errors import InvalidRequestError, RequestError
from snapllm.protocol.http.edge import decode_json
from snapllm.protocol.model_routes.model_routes import count_chat_tokens
from snapllm.protocol.model_routes.tokens import parse_detokenize, parse_tokenize, tokenize
from snapllm.protocol.responses.responses_api import inference_request, responses_fields
from snapllm.protocol.serving import OpenAIServing
from tests.support.family_models import family_model
from tests.support.generation import serving_over

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city."}},
            "required": ["city"],
        },
    },
}
#: A chat with a string in every field a chat request has (that holds one), the deprecated ones included.
CHAT: dict[str, Any] = {
    "model": "MODEL",
    "messages": [
        {"role": "system", "content": "Be brief.", "name": "rules"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in English."}]},
        {"role": "user", "content": "Weather in Paris?", "name": "ann"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "The user wants the weather.",
            "refusal": "none",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "tools": [WEATHER],
    "tool_choice": "auto",
    "stop": ["END"],
    "user": "user-1",
    "metadata": {"team": "blue"},
    "service_tier": "auto",
    "chat_template_kwargs": {"greeting": "hello"},
    "max_tokens": 4,
}
#: A Responses request with a string in every field (that holds one).
RESPONSE: dict[str, Any] = {
    "model": "MODEL",
    "instructions": "Be brief.",
    "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [{"type": "input_text", "text": "Sunny"}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]},
    ],
    "tools": [{"type": "function", **WEATHER["function"]}],
    "tool_choice": "auto",
    "metadata": {"team": "blue"},
    "max_output_tokens": 4,
}
TOKENIZE = {"model": "MODEL", "content": "Hello there"}
DETOKENIZE = {"model": "MODEL", "tokens": [1, 2]}
#: Where each request's JSON text is decoded again: a sent-back call's arguments.
CHAT_JSON_TEXT = [("messages", 3, "tool_calls", 0, "function", "arguments")]
RESPONSE_JSON_TEXT = [("input", 2, "arguments")]
Path = tuple[str | int, ...]


def string_fields(value: Any, path: Path = ()) -> Iterator[Path]:
    """The path of every string in ``value``."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from string_fields(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from string_fields(child, (*path, index))


def replaced(body: dict[str, Any], path: Path, text: str) -> dict[str, Any]:
    """``body`` with the string at ``path`` replaced by ``text``."""
    copied = copy.deepcopy(body)
    holder: Any = copied
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = text
    return copied


def param(path: Path) -> str:
    return ".".join(map(str, path))


def named(body: dict[str, Any], model: str) -> dict[str, Any]:
    """``body`` for ``model``: gpt-oss's template takes no content beside thinking in a turn that calls."""
    body = {**copy.deepcopy(body), "model": model}
    if model == "gpt-oss" and "messages" in body:
        body["messages"][3]["content"] = None
    return body


#: Text around one lone surrogate: any Unicode text (Hypothesis draws no surrogates for st.text()).
AROUND = st.text(max_size=12)
SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)


@st.composite
def lone_surrogate(draw: st.DrawFn) -> str:
    return draw(AROUND) + draw(SURROGATE) + draw(AROUND)


@pytest.fixture(scope="module")
def gpt_oss() -> OpenAIServing:
    model = family_model("gpt-oss")
    engine = Engine.load(str(model.path), EngineSettings(threads=1, n_ctx=2048), model_name="gpt-oss")
    return serving_over(engine, max_tokens=64)


def serve_chat(serving: OpenAIServing, raw: str) -> None:
    """A chat body (JSON text) as the completion and the input-tokens route take it: parsed, rendered and
    tokenized (nothing is generated)."""
    body = decode_json(raw)
    serving.prepare(serving.parse(body, required="messages"))
    count_chat_tokens(serving, body)


def serve_response(serving: OpenAIServing, raw: str) -> None:
    request = serving.parse(decode_json(raw), required="input")
    with responses_fields(request):
        serving.prepare(inference_request(request))


def refusal(serve: Any, serving: OpenAIServing, body: dict[str, Any]) -> RequestError:
    """The error ``body`` is refused with, sent as JSON text (a surrogate escaped as ``\\udxxx``)."""
    raw = json.dumps(body)
    assert raw.isascii()
    with pytest.raises(RequestError) as refused:
        serve(serving, raw)
    return refused.value


def assert_names(error: RequestError, path: Path) -> None:
    assert isinstance(error, InvalidRequestError) and error.status_code == 400, error
    assert error.param == param(path), error.message
    assert "unpaired surrogate" in error.message and "codec" not in error.message


@pytest.mark.parametrize("model", ["smollm2", "gpt-oss"])
def test_the_full_requests_are_served(serving, gpt_oss, model):
    # What every property below changes one field of: served as they are.
    over = {"smollm2": serving, "gpt-oss": gpt_oss}[model]
    serve_chat(over, json.dumps(named(CHAT, model)))
    serve_response(over, json.dumps(named(RESPONSE, model)))


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(list(string_fields(CHAT))), text=lone_surrogate())
def test_a_lone_surrogate_in_any_chat_field_is_a_400_naming_it(serving, path, text):
    assert_names(refusal(serve_chat, serving, replaced(named(CHAT, "smollm2"), path, text)), path)


@settings(max_examples=100, deadline=None)
@given(path=st.sampled_from(list(string_fields(RESPONSE))), text=lone_surrogate())
def test_a_lone_surrogate_in_any_responses_field_is_a_400_naming_it(serving, path, text):
    assert_names(refusal(serve_response, serving, replaced(named(RESPONSE, "smollm2"), path, text)), path)


@settings(max_examples=40, deadline=None)
@given(
    route=st.sampled_from(["tokenize", "detokenize"]),
    field=st.sampled_from(["model", "content"]),
    text=lone_surrogate(),
)
def test_a_lone_surrogate_in_a_token_routes_field_is_a_400_naming_it(serving, route, field, text):
    field = "model" if route == "detokenize" else field
    body = replaced({"tokenize": TOKENIZE, "detokenize": DETOKENIZE}[route], (field,), text)

    def serve(serving: OpenAIServing, raw: str) -> None:
        if route == "tokenize":
            tokenize(serving.engine, parse_tokenize(decode_json(raw)), max_chars=32_000)
        else:
            parse_detokenize(decode_json(raw))

    assert_names(refusal(serve, serving, body), (field,))


def double_escaped(text: str) -> str:
    """JSON text whose one string holds ``text``: escaped once here, once more in the body."""
    return json.dumps({"city": text})


@settings(max_examples=60, deadline=None)
@given(
    text=lone_surrogate(),
    model=st.sampled_from(["smollm2", "gpt-oss"]),
    route=st.sampled_from(["chat", "responses"]),
)
def test_a_lone_surrogate_in_json_text_decoded_again_is_a_400_naming_the_field(
    serving, gpt_oss, text, model, route
):
    over = {"smollm2": serving, "gpt-oss": gpt_oss}[model]
    body, paths, serve = (
        (CHAT, CHAT_JSON_TEXT, serve_chat)
        if route == "chat"
        else (RESPONSE, RESPONSE_JSON_TEXT, serve_response)
    )
    for path in paths:
        assert_names(refusal(serve, over, replaced(named(body, model), path, double_escaped(text))), path)


@settings(max_examples=30, deadline=None)
@given(text=AROUND, model=st.sampled_from(["smollm2", "gpt-oss"]))
def test_escaped_text_that_is_unicode_is_served_wherever_it_is(serving, gpt_oss, text, model):
    # A pair of escapes is one character; escapes in text that is not decoded again are plain text.
    over = {"smollm2": serving, "gpt-oss": gpt_oss}[model]
    arguments = double_escaped(text + "\U0001f600")
    for free_text in (
        ("messages", 2, "content"),
        ("messages", 4, "content"),
        ("messages", 3, "reasoning_content"),
    ):
        serve_chat(over, json.dumps(replaced(named(CHAT, model), free_text, double_escaped("\ud800" + text))))
    serve_chat(over, json.dumps(replaced(named(CHAT, model), CHAT_JSON_TEXT[0], arguments)))
    serve_response(over, json.dumps(replaced(named(RESPONSE, model), RESPONSE_JSON_TEXT[0], arguments)))


# --- gpt-oss: a tool without a description; a chat_template_kwargs value its template cannot use ---------


def _weather_chat(function: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "model": "gpt-oss",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": function}],
        "max_tokens": 4,
        "seed": 1,
        **fields,
    }


def test_gpt_oss_serves_a_tool_without_a_description(gpt_oss):
    undescribed = {k: v for k, v in WEATHER["function"].items() if k != "description"}
    request = gpt_oss.parse(_weather_chat(undescribed), required="messages")
    prepared = gpt_oss.prepare(request)
    # The template gets an empty description, where it writes one: "// " and the line's end.
    empty = gpt_oss.prepare(
        gpt_oss.parse(_weather_chat({**undescribed, "description": ""}), required="messages")
    )
    assert prepared.engine_request.tokens == empty.engine_request.tokens
    prompt = gpt_oss._chat.render(request).prompt
    assert "// \ntype get_weather = (_: {\n// The city.\ncity: string,\n}) => any;" in prompt
    # Served end to end, on the Responses route too.
    answer, _generation = gpt_oss.complete(request, deadline=None)
    assert answer["object"] == "chat.completion"
    response = gpt_oss.parse(
        {
            "input": "Weather in Paris?",
            "tools": [{"type": "function", **undescribed}],
            "max_output_tokens": 4,
        },
        required="input",
    )
    answer, _generation = gpt_oss.complete(response, deadline=None)
    assert answer["object"] == "response"


def test_gpt_oss_names_a_chat_template_kwargs_value_its_template_cannot_use(gpt_oss):
    # Its template writes "Reasoning: " + reasoning_effort; a number there was a 400 naming messages, with
    # Python's "can only concatenate str (not "int") to str" as the whole reason.
    body = {**_weather_chat(WEATHER["function"]), "chat_template_kwargs": {"reasoning_effort": 5}}
    with pytest.raises(InvalidRequestError) as refused:
        gpt_oss.prepare(gpt_oss.parse(body, required="messages"))
    assert refused.value.param == "chat_template_kwargs"
    assert "'reasoning_effort'" in refused.value.message
