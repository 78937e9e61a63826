"""Each family's tool-call grammar (Lark, for llguidance) without a model: it takes the call as the family
really writes it, with the spaces its models write and without them, refuses a wrong name and invalid
arguments, and what it takes reads back as the same call, whole and cut short at every point.

The grammars run on llguidance's own matcher over a byte-level vocabulary whose special tokens are the
families' markers (:class:`tests.support.byte_tokenizer.ByteVocabulary`), as they are special tokens in
the families' real vocabularies; and over the same vocabulary without them, for a model that writes the
markers as text.
"""

from __future__ import annotations

import json

import pytest

from snapllm.protocol.completions.constraints import chat_grammar
from snapllm.protocol.constraints.lark_grammar import marker_tokens, spelled
from snapllm.protocol.families.families import QWEN3_THINKING, THINK_TAGS, GptOss
from snapllm.protocol.families.tool_formats import (
    DEEPSEEK,
    GENERIC,
    GRANITE,
    HARMONY,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    MISTRAL_ARGS,
    PHI4,
    ToolCallFormat,
)
from snapllm.protocol.requests import parse_request
from tests.support.byte_tokenizer import ByteVocabulary

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {"name": "get_weather", "parameters": CITY}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}
NAMES = {"get_weather", "get_time"}
SPECIALS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "[TOOL_CALLS]",
    "[CALL_ID]",
    "[ARGS]",
    "<|tool_call|>",
    "<|/tool_call|>",
]
TOKENS = ByteVocabulary(SPECIALS)
TEXT = ByteVocabulary()

SPACED = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
COMPACT = '{"name":"get_weather","arguments":{"city":"Paris","days":2}}'
INDENTED = '{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n    "days": 2\n  }\n}'
ARGUMENTS = '{"city": "Paris", "days": 2}'


def _deepseek(arguments: str, name: str = "get_weather", fence: str = "\n") -> str:
    return (
        f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json{fence}"
        f"{arguments}{fence}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    )


# Each family's call as its models write it: with the spacing its template shows, and without any.
WRITTEN: dict[str, list[str]] = {
    "json": [SPACED, COMPACT, INDENTED, f"[{SPACED}, {COMPACT}]"],
    "llama3-json": [
        SPACED.replace("arguments", "parameters"),
        COMPACT.replace("arguments", "parameters"),
    ],
    "hermes": [
        f"<tool_call>\n{SPACED}\n</tool_call>",
        f"<tool_call>{COMPACT}</tool_call>",
        f"<tool_call>\n{SPACED}\n</tool_call>\n<tool_call>\n{COMPACT}\n</tool_call>",
    ],
    "mistral": [f"[TOOL_CALLS][{SPACED}]", f"[TOOL_CALLS] [{COMPACT}, {SPACED}]"],
    "mistral-args": [
        f"[TOOL_CALLS]get_weather[ARGS]{ARGUMENTS}",
        '[TOOL_CALLS]get_weather[ARGS]{"city":"Paris","days":2}',
        f"[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{ARGUMENTS}",
        f"[TOOL_CALLS]get_weather[ARGS]{ARGUMENTS}[TOOL_CALLS]get_weather[ARGS] {ARGUMENTS}",
    ],
    "phi4": [f"<|tool_call|>[{SPACED}]<|/tool_call|>", f"<|tool_call|>[{COMPACT}]<|/tool_call|>"],
    "granite": [f"<|tool_call|>[{SPACED}]", f"<|tool_call|> [{COMPACT}]"],
    "deepseek": [_deepseek(ARGUMENTS), _deepseek('{"city":"Paris","days":2}', fence="")],
    "harmony": [
        f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{ARGUMENTS}",
        '<|channel|>commentary to=functions.get_weather<|message|>{"city":"Paris","days":2}',
        f" to=functions.get_weather<|channel|>commentary json<|message|>{ARGUMENTS}",
    ],
}
FORMATS: list[ToolCallFormat] = [
    GENERIC,
    LLAMA3_JSON,
    HERMES,
    MISTRAL,
    MISTRAL_ARGS,
    PHI4,
    GRANITE,
    DEEPSEEK,
    HARMONY,
]


def _request(tool_choice="required", **fields):
    return parse_request(
        {
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": f} for f in (WEATHER, TIME)],
            "tool_choice": tool_choice,
            **fields,
        }
    )


def _grammar(vocabulary: ByteVocabulary, tool_format: ToolCallFormat, **kwargs) -> str:
    request = kwargs.pop("request", None) or _request(kwargs.pop("tool_choice", "required"))
    grammar, _ = chat_grammar(request, tool_format=tool_format, specials=vocabulary.specials, **kwargs)
    assert grammar is not None
    return grammar


@pytest.mark.parametrize("vocabulary", [TOKENS, TEXT], ids=["markers-as-tokens", "markers-as-text"])
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
@pytest.mark.parametrize("tool_format", FORMATS, ids=lambda f: f.name)
def test_the_grammar_takes_each_call_as_the_family_writes_it(tool_format, tool_choice, vocabulary):
    grammar = _grammar(vocabulary, tool_format, tool_choice=tool_choice)
    for text in WRITTEN[tool_format.name]:
        assert vocabulary.allows(grammar, text), text
        calls = tool_format.parse(text, NAMES)
        assert calls and {name for name, _ in calls} == {"get_weather"}, text
        assert all(json.loads(arguments) == {"city": "Paris", "days": 2} for _, arguments in calls)


@pytest.mark.parametrize("tool_format", FORMATS, ids=lambda f: f.name)
def test_a_wrong_name_or_invalid_arguments_are_refused(tool_format):
    grammar = _grammar(TOKENS, tool_format)
    text = WRITTEN[tool_format.name][0]
    wrong = [
        text.replace("get_weather", "get_wether"),
        text.replace('"Paris"', "12"),  # city is a string
        text.replace('"days": 2', '"weeks": 2'),  # no such property
        text.replace('"city": "Paris", ', ""),  # city is required
    ]
    for bad in wrong:
        assert bad != text
        assert not TOKENS.allows(grammar, bad), bad


@pytest.mark.parametrize("tool_format", FORMATS, ids=lambda f: f.name)
def test_a_call_read_while_it_streams_is_the_call_so_far(tool_format):
    for text in WRITTEN[tool_format.name]:
        whole = tool_format.parse(text, NAMES)
        assert whole is not None
        for cut in range(1, len(text)):
            found = tool_format.parse_cut(text[:cut], NAMES)
            if found is None:
                # Only the generic formats are not yet calls before their first character that shows one.
                assert not tool_format.opener or not text[:cut].strip(), text[:cut]
                continue
            assert all(name in (None, "get_weather") for name, _ in found), (text[:cut], found)
        assert tool_format.parse_cut(text, NAMES) == whole


def test_spacing_is_bounded_so_a_model_cannot_spend_its_tokens_on_it():
    grammar = _grammar(TOKENS, HERMES)
    assert TOKENS.allows(grammar, f"<tool_call>\n{SPACED}\n</tool_call>")
    assert not TOKENS.allows_prefix(grammar, "<tool_call>" + " " * 3)
    assert not TOKENS.allows_prefix(grammar, '<tool_call>\n{"name":' + " " * 3)
    assert not TOKENS.allows_prefix(grammar, '<tool_call>\n{"name": "get_weather",' + "\n" + " " * 30)


def test_llama_31_writes_a_space_after_the_colon_and_keeps_its_city():
    # Forced onto compact JSON, Llama 3.1 left its own tokens and named another city: its spacing is allowed.
    grammar = _grammar(TEXT, LLAMA3_JSON)
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert TEXT.allows(grammar, text)
    assert LLAMA3_JSON.parse(text, NAMES) == [("get_weather", '{"city": "Paris"}')]


def test_under_auto_text_comes_before_the_calls_of_a_format_with_an_opener():
    for vocabulary in (TOKENS, TEXT):
        grammar = _grammar(vocabulary, HERMES, tool_choice="auto")
        assert vocabulary.allows(grammar, "I will look it up.")
        assert vocabulary.allows(grammar, f"I will look it up.\n<tool_call>\n{SPACED}\n</tool_call>")
        assert vocabulary.allows(grammar, "")
        assert not vocabulary.allows(grammar, f"<tool_call>\n{SPACED}\n</tool_call> and more text")
    # Written as text, the opener cannot stand in the text: it starts the calls.
    grammar = _grammar(TEXT, HERMES, tool_choice="auto")
    assert not TEXT.allows(grammar, "The tag <tool_call> opens a call.")
    assert HERMES.split(f"Looking.\n<tool_call>\n{SPACED}\n</tool_call>") == (
        "Looking.",
        f"<tool_call>\n{SPACED}\n</tool_call>",
    )


@pytest.mark.parametrize("tool_format", [GENERIC, LLAMA3_JSON], ids=lambda f: f.name)
def test_under_auto_a_format_without_an_opener_is_a_call_or_text(tool_format):
    grammar = _grammar(TEXT, tool_format, tool_choice="auto")
    assert TEXT.allows(grammar, "It is sunny.")
    assert TEXT.allows(grammar, WRITTEN[tool_format.name][0])
    # The first character tells them apart: text does not open with a brace or with spacing.
    assert not TEXT.allows(grammar, " It is sunny.")
    assert not TEXT.allows(grammar, '{"weather": "sunny"}')


def test_a_response_format_beside_tools_is_its_json_or_a_call():
    form = {
        "type": "json_schema",
        "json_schema": {
            "name": "town",
            "schema": {"type": "object", "properties": {"town": {"type": "string"}}, "required": ["town"]},
        },
    }
    request = _request("auto", response_format=form)
    for tool_format in (GENERIC, HERMES):
        grammar = _grammar(TOKENS, tool_format, request=request)
        assert TOKENS.allows(grammar, '{"town": "Oslo"}')
        assert TOKENS.allows(grammar, '{"town":"Oslo"}')
        assert TOKENS.allows(grammar, WRITTEN[tool_format.name][0])
        assert not TOKENS.allows(grammar, "Oslo")
        assert not TOKENS.allows(grammar, '{"city": "Oslo"}')


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_a_response_format_alone_is_json_with_bounded_spacing(kind):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    form = (
        {"type": kind}
        if kind == "json_object"
        else {"type": kind, "json_schema": {"name": "a", "schema": schema}}
    )
    request = parse_request({"messages": [{"role": "user", "content": "x"}], "response_format": form})
    grammar, calls = chat_grammar(request)
    assert grammar is not None and calls is None
    for text in ('{"ok": true}', '{"ok":true}', '{\n  "ok": true\n}'):
        assert TEXT.allows(grammar, text), text
    assert not TEXT.allows(grammar, "yes")
    assert not TEXT.allows_prefix(grammar, "{" + " " * 4)


def test_free_text_has_no_grammar():
    request = parse_request({"messages": [{"role": "user", "content": "x"}]})
    assert chat_grammar(request) == (None, None)
    assert chat_grammar(_request("none")) == (None, None)


@pytest.mark.parametrize("vocabulary", [TOKENS, TEXT], ids=["markers-as-tokens", "markers-as-text"])
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_the_model_thinks_freely_first_then_the_grammar_holds_its_answer(tool_choice, vocabulary):
    call = f"<tool_call>\n{SPACED}\n</tool_call>"
    for state, thinking in (("open", THINK_TAGS), ("optional", THINK_TAGS), ("optional", QWEN3_THINKING)):
        grammar = _grammar(vocabulary, HERMES, tool_choice=tool_choice, thinking=thinking, state=state)
        opened = "" if state == "open" else "<think>"
        assert vocabulary.allows(grammar, f"{opened}\nParis, then. {{not json}} <b>\n</think>\n\n{call}")
        # The thinking cannot end in the middle: after its end marker comes the answer.
        assert not vocabulary.allows(grammar, f"{opened}Hm.</think>\n\nNot a call</think>{call}") or (
            tool_choice == "auto"
        )
        if state == "optional":
            # Qwen3 always thinks when its thinking is on; another model may answer at once.
            assert vocabulary.allows(grammar, call) == (thinking is THINK_TAGS)
    closed = _grammar(vocabulary, HERMES, tool_choice=tool_choice, thinking=THINK_TAGS, state="closed")
    assert vocabulary.allows(closed, call)
    # Past the thinking, a forced call is the call alone; under "auto", text may come first, which cannot
    # hold the model's special tokens.
    expected = tool_choice == "auto" and vocabulary is TEXT
    assert vocabulary.allows(closed, f"<think>Hm.</think>{call}") == expected


GPT_OSS = GptOss()
ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant"
HARMONY_CALL = f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{ARGUMENTS}"


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_gpt_oss_writes_its_call_on_the_commentary_channel(tool_choice):
    markers = GPT_OSS.thinking
    grammar = _grammar(TOKENS, HARMONY, tool_choice=tool_choice, thinking=markers, state="optional")
    for text in (f"{ANALYSIS}{HARMONY_CALL}", HARMONY_CALL, f"{ANALYSIS}{WRITTEN['harmony'][2]}"):
        assert TOKENS.allows(grammar, text), text
        _, answer = markers.split(text, state="optional")
        assert HARMONY.split(answer)[0] == ""
        assert HARMONY.parse(HARMONY.split(answer)[1], NAMES) == [
            ("get_weather", '{"city": "Paris", "days": 2}')
        ]
    final = f"{ANALYSIS}<|channel|>final<|message|>It is sunny in Paris."
    assert TOKENS.allows(grammar, final) == (tool_choice == "auto")
    # Noise on the commentary channel is no call, and not an answer either.
    assert not TOKENS.allows(grammar, f"{ANALYSIS}<|channel|>commentary noise noise")


def test_markers_are_the_models_special_tokens_where_it_has_them():
    control = {"<|channel|>", "<|message|>", "<|im_end|>", "[TOOL_CALLS]"}
    user = {"<tool_call>", "</tool_call>", "plain"}
    ids = {
        "<|channel|>": [7],
        "<|message|>": [8],
        "[TOOL_CALLS]": [9],
        "<tool_call>": [10],
        "</tool_call>": [11],
    }
    found = marker_tokens(
        ["<|channel|>final<|message|>", "[TOOL_CALLS]", "<tool_call>", "plain"],
        control=control,
        user=user,
        tokenize=lambda text: ids.get(text, [1, 2]),
    )
    # Only the markers' tokens, and only the user-defined ones llguidance marks special (written as <...>).
    assert found == {"<|channel|>": 7, "<|message|>": 8, "[TOOL_CALLS]": 9, "<tool_call>": 10}
    assert spelled("<|channel|>final<|message|>", found) == '<[7]> "final" <[8]>'
    assert spelled('say "hi"\n', {}) == '"say \\"hi\\"\\n"'


#: A tool whose parameters say nothing of keys besides their properties (JSON Schema then allows any).
OPEN = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "where": {"type": "object", "properties": {"x": {}}}},
        "required": ["city"],
    },
}


@pytest.mark.parametrize("tool_format", FORMATS, ids=lambda f: f.name)
def test_arguments_are_generated_with_only_the_keys_the_tool_lists(tool_format):
    # A model that invents a key, or copies the schema's own ("required") into the call, is refused, nested
    # objects too, as llama.cpp's converter refuses them; the tool's own keys are taken.
    request = parse_request(
        {
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": OPEN}],
            "tool_choice": "required",
        }
    )
    grammar = _grammar(TOKENS, tool_format, request=request)
    text = WRITTEN[tool_format.name][0]
    for arguments in ('{"city": "Paris", "days": 2}', '{"city":"Paris","days":2}'):
        text = text.replace(arguments, '{"city": "Paris", "where": {"x": 1}}')
    assert TOKENS.allows(grammar, text), text
    for extra in ('"required": ["city"]', '"# appreciable": 1'):
        assert not TOKENS.allows(grammar, text.replace('"city": "Paris"', f'"city": "Paris", {extra}')), extra
    assert not TOKENS.allows(grammar, text.replace('{"x": 1}', '{"x": 1, "y": 2}'))
