"""Each model family's pieces without a model: which family a template is, its tool-call format (the
grammar, drawn by the engine's constraint over the packaged model's vocabulary, read back by the format's
parser), its thinking markers (whole and streamed), and the free-text rule that keeps a marker out.
"""

from __future__ import annotations

import json

import jsonschema
import llguidance
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_cpp import Llama

from snapllm.protocol.completions.constraints import chat_grammar
from snapllm.protocol.constraints.lark_grammar import text_without
from snapllm.protocol.families.families import THINK_TAGS, detect_family
from snapllm.protocol.families.reasoning import ReasoningSplitter, ThinkingMarkers
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
from snapllm_dev.packaged_models import smollm2_path
from tests.support.grammar_sampler import GrammarSampler

WEATHER = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}
FUNCTIONS = [WEATHER, TIME]
SCHEMAS = {f["name"]: f["parameters"] for f in FUNCTIONS}
FORMATS = [GENERIC, LLAMA3_JSON, HERMES, MISTRAL, MISTRAL_ARGS, PHI4, GRANITE, DEEPSEEK, HARMONY]


@pytest.fixture(scope="module")
def sampler() -> GrammarSampler:
    llama = Llama(model_path=str(smollm2_path()), vocab_only=True, verbose=False)
    return GrammarSampler(llama)


# Template fragments that mark each family (each family's real template holds its fragment; the suite of
# real templates is in tests/integration).
@pytest.mark.parametrize(
    ("template", "architecture", "family"),
    [
        ("{{ enable_thinking }}<think></think><tool_call>", "", "qwen3"),
        ("<|im_start|>{{ tools }}<tool_call></tool_call>", "", "hermes"),
        ("<tool_call><think>", "", "hermes-thinking"),
        ("<｜Assistant｜><think>", "", "deepseek-r1"),
        ("<|start_header_id|>{{ tools }}", "", "llama3"),
        ("<|start|>assistant<|channel|>final<|message|>", "", "gpt-oss"),
        ("[TOOL_CALLS]", "", "mistral"),
        ("[TOOL_CALLS]{{ name }}[ARGS]{{ arguments }}", "", "mistral-args"),
        ("<|tool_call|>{{ x }}<|/tool_call|>", "", "phi4-mini"),
        ("<|start_of_role|><|tool_call|>", "", "granite"),
        ("<start_of_turn>", "", "gemma"),
        ("<|im_start|>{{ m.content }}", "", "generic"),
        ("", "qwen3", "qwen3"),
        ("", "gemma3", "gemma"),
        ("", "mystery", "generic"),
    ],
)
def test_a_template_names_its_family(template, architecture, family):
    assert detect_family(template, architecture=architecture).name == family


def test_thinking_is_switched_through_the_template_only_where_it_has_a_switch():
    assert detect_family("enable_thinking <think>").template_kwargs("none") == {"enable_thinking": False}
    assert detect_family("enable_thinking <think>").template_kwargs("high") == {"enable_thinking": True}
    assert detect_family("enable_thinking <think>").template_kwargs(None) == {"enable_thinking": True}
    assert detect_family("<｜Assistant｜>").template_kwargs("none") == {}
    assert detect_family("<｜Assistant｜>{{ enable_thinking }}").template_kwargs(None) == {
        "enable_thinking": True
    }
    assert detect_family("<|im_start|>{{ enable_thinking }}").template_kwargs("none") == {}


def _check_calls(calls: list[tuple[str, str]] | None, text: str) -> None:
    assert calls, text
    for name, arguments in calls:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("tool_format", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("parallel", [False, True])
def test_every_call_the_grammar_allows_reads_back_as_valid_calls(
    tool_format: ToolCallFormat, parallel, sampler
):
    rules = tool_format.grammar(FUNCTIONS, parallel=parallel, specials={})
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: calls\n{rules}")
    assert sampler.accepts(grammar)
    texts = list(sampler.texts(grammar, count=6, seed=3, max_tokens=400))
    assert len(texts) >= 3
    for text in texts:
        if tool_format.opener:
            assert text.startswith(tool_format.openers)
        calls = tool_format.parse(text, SCHEMAS)
        _check_calls(calls, text)
        if not parallel or tool_format in (HARMONY, LLAMA3_JSON):  # one call per turn in these formats
            assert len(calls or []) == 1
        # Cut anywhere, it is still calls (or nothing yet), never an error.
        for cut in range(1, len(text), max(1, len(text) // 12)):
            found = tool_format.parse_cut(text[:cut], SCHEMAS)
            assert found is None or all(name is None or name in SCHEMAS for name, _ in found)


@pytest.mark.parametrize("tool_format", [HERMES, MISTRAL, MISTRAL_ARGS, PHI4, DEEPSEEK], ids=lambda f: f.name)
def test_text_is_not_read_as_a_call(tool_format: ToolCallFormat):
    assert tool_format.parse("The weather is fine.", SCHEMAS) is None
    assert tool_format.parse_cut("The weather", SCHEMAS) is None
    wrong = '{"name":"get_weather","arguments":{"town":"Paris"}}'
    assert tool_format.parse(tool_format.opener + wrong, {"other"}) is None


def test_hermes_reads_the_spacing_models_write():
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    )
    assert HERMES.parse(text, SCHEMAS) == [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")]
    assert HERMES.parse_cut('<tool_call>\n{"name": "get_weather", "arguments": {"ci', SCHEMAS) == [
        ("get_weather", '{"ci')
    ]


def test_mistral_reads_each_call_by_name_with_or_without_its_id():
    text = '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Oslo"}\n[TOOL_CALLS]get_time[ARGS]{}'
    assert MISTRAL_ARGS.parse(text, SCHEMAS) == [("get_weather", '{"city": "Oslo"}'), ("get_time", "{}")]
    assert MISTRAL_ARGS.parse_cut('[TOOL_CALLS]get_weather[ARGS]{"ci', SCHEMAS) == [("get_weather", '{"ci')]
    assert MISTRAL_ARGS.parse_cut("[TOOL_CALLS]get_t", SCHEMAS) == [("get_time", "")]
    assert MISTRAL_ARGS.parse("[TOOL_CALLS]get_weather[ARGS]{", SCHEMAS) is None


def test_deepseek_reads_its_markers():
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert DEEPSEEK.parse(text, SCHEMAS) == [("get_weather", '{"city": "Oslo"}')]
    assert DEEPSEEK.parse_cut(text[: text.index("\n```<")], SCHEMAS) == [("get_weather", '{"city": "Oslo"}')]


def test_harmony_reads_the_recipient_before_or_after_the_channel():
    template_order = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}'
    model_order = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Rome"}'
    for text in (template_order, model_order):
        assert HARMONY.parse(text[text.find("to=") :], SCHEMAS) == [("get_weather", '{"city": "Rome"}')]
    assert HARMONY.parse_cut("to=functions.get_w", SCHEMAS) == [("get_weather", "")]


def test_gpt_oss_channels_become_reasoning_and_answer():
    family = detect_family("<|channel|>analysis<|message|> {{ reasoning_effort }}")
    markers = family.thinking
    assert markers is not None and family.special_text
    text = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi."
    assert markers.split(text, state="optional") == ("Think.", "Hi.")
    assert markers.split("<|channel|>final<|message|>Hi.", state="optional") == (None, "Hi.")
    # max_tokens cut the answer's header short: nothing of it is the answer.
    assert markers.split(text[: text.index("final") + 5], state="optional") == ("Think.", "")
    splitter = ReasoningSplitter(markers, state="optional")
    pieces = [piece for ch in text for piece in splitter.feed(ch)] + splitter.flush()
    assert "".join(t for k, t in pieces if k == "content") == "Hi."
    assert family.template_kwargs("none") == {"reasoning_effort": "low"}


def test_the_free_text_rule_never_writes_its_word(sampler):
    for word in ("<tool_call>", "</think>", "abab", "<｜tool▁calls▁begin｜>"):
        grammar = llguidance.LLMatcher.grammar_from_lark("start: FREE\n" + text_without([word], {}, "FREE"))
        assert sampler.accepts(grammar)
        texts = list(sampler.texts(grammar, count=20, seed=5, max_tokens=40))
        assert texts
        assert all(word not in text for text in texts)


def _chat(**fields):
    return parse_request({"messages": [{"role": "user", "content": "Weather?"}], **fields})


@pytest.mark.parametrize("state", ["open", "optional"])
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_the_grammar_lets_the_model_think_first_then_holds_the_answer(state, tool_choice, sampler):
    request = _chat(tools=[{"type": "function", "function": WEATHER}], tool_choice=tool_choice)
    grammar, calls = chat_grammar(request, tool_format=HERMES, thinking=THINK_TAGS, state=state)
    assert grammar is not None and sampler.accepts(grammar)
    assert calls == ("all" if tool_choice == "required" else "auto")
    texts = list(sampler.texts(grammar, count=6, seed=7, max_tokens=200))
    if state == "open":
        # Random tokens seldom close a thought opened by the prompt: a model's thought, then its call.
        texts = ['It is about Paris.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
                 '{"city": "Paris"}}\n</tool_call>']  # fmt: skip
        assert sampler.allows(grammar, texts[0])
    assert texts
    for text in texts:
        reasoning, answer = THINK_TAGS.split(text, state=state)
        if state == "open":
            assert reasoning is not None
        if tool_choice == "required":
            _check_calls(HERMES.parse(answer[answer.find("<tool_call>") :], SCHEMAS), text)


def test_a_json_answer_beside_generic_calls_keeps_its_own_shape(sampler):
    form = {
        "type": "json_schema",
        "json_schema": {
            "name": "a",
            "schema": {
                "type": "object",
                "properties": {"town": {"type": "string"}},
                "required": ["town"],
                "additionalProperties": False,
            },
        },
    }
    request = _chat(tools=[{"type": "function", "function": WEATHER}], response_format=form)
    grammar, _ = chat_grammar(request)
    assert grammar is not None
    for text in sampler.texts(grammar, count=12, seed=11, max_tokens=120):
        call = GENERIC.parse(text, SCHEMAS)
        if call is None:
            jsonschema.validate(json.loads(text), form["json_schema"]["schema"])
        else:
            _check_calls(call, text)


MARKERS = [
    THINK_TAGS,
    ThinkingMarkers(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        answer_headers=("<|start|>assistant<|channel|>final<|message|>",),
    ),
]


@settings(max_examples=80, deadline=None)
@given(
    markers=st.sampled_from(MARKERS),
    thought=st.text(st.characters(exclude_characters="<>"), max_size=20),
    answer=st.text(st.characters(exclude_characters="<>"), min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=8),
    opened=st.booleans(),
    kept=st.integers(min_value=0, max_value=200),
)
def test_the_stream_splits_thinking_from_the_answer_as_the_whole_text_does(
    markers, thought, answer, cuts, opened, kept
):
    state = "open" if opened else "optional"
    text = (
        ("" if opened else markers.start)
        + thought
        + markers.end
        + "\n\n"
        + "".join(markers.answer_headers[:1])
        + answer
    )[:kept]  # max_tokens may cut the text anywhere, inside a marker or a header too
    whole_reasoning, whole_answer = markers.split(text, state=state)
    splitter = ReasoningSplitter(markers, state=state)
    pieces = []
    at = 0
    for cut in sorted({min(c, len(text)) for c in cuts}):
        pieces += splitter.feed(text[at:cut])
        at = cut
    pieces += splitter.feed(text[at:]) + splitter.flush()
    streamed_reasoning = "".join(t for kind, t in pieces if kind == "reasoning")
    streamed_answer = "".join(t for kind, t in pieces if kind == "content")
    assert streamed_reasoning.strip() == (whole_reasoning or "")
    assert streamed_answer.lstrip() == whole_answer


def test_a_prompt_says_where_the_thinking_stands():
    assert THINK_TAGS.prompt_state("<|im_start|>assistant\n<think>\n") == "open"
    assert THINK_TAGS.prompt_state("<|im_start|>assistant\n<think>\n\n</think>\n\n") == "closed"
    assert THINK_TAGS.prompt_state("<|im_start|>assistant\n") == "optional"
    assert THINK_TAGS.split("no thinking here", state="optional") == (None, "no thinking here")
    assert THINK_TAGS.split("cut in the thou", state="open") == ("cut in the thou", "")
