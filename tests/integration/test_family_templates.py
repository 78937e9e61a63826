"""Every family chat template that can be obtained (the tokenizer packages', llama.cpp's corpus, the packaged
model's), rendered by snapllm and by the reference, Hugging Face's ``render_jinja_template`` (what
``apply_chat_template`` runs), over one conversation suite: the prompts must be equal.

The reference gets the conversation as Hugging Face callers write it: tool-call arguments as a mapping, and
an assistant turn that only calls tools with ``""`` as its content (OpenAI clients send ``null``, which
most templates cannot concatenate; snapllm renders it as ``""``). Thinking is switched in the reference by
the template's own variables (``enable_thinking``, ``reasoning_effort``), and in snapllm by the request's
``chat_template_kwargs`` or ``reasoning_effort``.

Templates that write no ``tools`` get snapllm's generic tool format instead of the reference's (which drops
the tools); for those the tool cases check the generic instructions are in the prompt. A template that
writes earlier calls in its family's format all the same (DeepSeek-R1's) renders them itself: the reference
gets the family's instructions in the system turn, as snapllm writes them. Where the reference refuses a
conversation, snapllm must answer 400 (``InvalidRequestError`` on ``messages``), never crash.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from snapllm.errors import InvalidRequestError
from snapllm.protocol.completions.chat import ChatRenderer
from snapllm.protocol.constraints.structured import generic_tool_instructions
from snapllm.protocol.families.families import FAMILIES, detect_family
from snapllm.protocol.requests import ChatCompletionRequest, parse_request
from snapllm_dev.testmodels.families import TEMPLATE_ONLY, TEST_MODEL_FAMILIES
from snapllm_dev.testmodels.sources import corpus_folder
from snapllm_dev.testmodels.templates import FamilyTemplate, family_templates

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city."},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
QUESTION = {"role": "user", "content": "What's the weather in Paris? Réponds en français, s'il te plaît."}


def _tool_turns(call_id: str) -> list[dict[str, Any]]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
    }
    return [
        SYSTEM,
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": '{"temperature": 18, "sky": "clear"}'},
    ]


@dataclass(frozen=True)
class Case:
    """A request to snapllm, and the template variables the reference gets for it."""

    body: dict[str, Any]
    reference_variables: dict[str, Any] = field(default_factory=dict)
    #: The case applies to templates that hold this text (any template when empty).
    needs: str = ""


CASES: dict[str, Case] = {
    "system + user": Case({"messages": [SYSTEM, {"role": "user", "content": "Hello!"}]}),
    "multi-turn": Case(
        {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "Tell me a joke."},
            ]
        }
    ),
    "tools": Case({"messages": [SYSTEM, QUESTION], "tools": [WEATHER]}),
    # Mistral's template takes only 9-character alphanumeric call ids; OpenAI's look like "call_...".
    "tool call + result": Case({"messages": _tool_turns("call12345"), "tools": [WEATHER]}),
    "tool call + result, no tools": Case({"messages": _tool_turns("call12345")}),
    "tool call + result, OpenAI id": Case({"messages": _tool_turns("call_Qx7dVb1kLm2n"), "tools": [WEATHER]}),
    "thinking off (chat_template_kwargs)": Case(
        {"messages": [QUESTION], "chat_template_kwargs": {"enable_thinking": False}},
        {"enable_thinking": False},
        needs="enable_thinking",
    ),
    "thinking on (chat_template_kwargs)": Case(
        {"messages": [QUESTION], "chat_template_kwargs": {"enable_thinking": True}},
        {"enable_thinking": True},
        needs="enable_thinking",
    ),
    "thinking off (reasoning_effort none)": Case(
        {"messages": [QUESTION], "reasoning_effort": "none"},
        {"enable_thinking": False},
        needs="enable_thinking",
    ),
    "thinking on (reasoning_effort high)": Case(
        {"messages": [QUESTION], "reasoning_effort": "high"},
        {"enable_thinking": True},
        needs="enable_thinking",
    ),
    "reasoning_effort low": Case(
        {"messages": [SYSTEM, QUESTION], "reasoning_effort": "low"},
        {"reasoning_effort": "low"},
        needs="reasoning_effort",
    ),
    "reasoning_effort high": Case(
        {"messages": [SYSTEM, QUESTION], "reasoning_effort": "high"},
        {"reasoning_effort": "high"},
        needs="reasoning_effort",
    ),
}

TEMPLATE_NAMES = [*TEST_MODEL_FAMILIES, "deepseek-v3", *TEMPLATE_ONLY, "smollm2"]


@functools.cache
def templates() -> dict[str, FamilyTemplate]:
    return {source.family: source for source in family_templates()}


def reference_prompt(source: FamilyTemplate, case: Case, *, instructions: str = "") -> str:
    """The reference's prompt; ``instructions`` are added to the system turn as snapllm adds its tools'."""
    messages = copy.deepcopy(case.body["messages"])
    if instructions:
        messages[0]["content"] += "\n\n" + instructions
    for message in messages:
        if message.get("content") is None:
            message["content"] = ""
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    rendered = render_jinja_template(
        [messages],
        tools=case.body.get("tools"),
        chat_template=source.template,
        add_generation_prompt=True,
        bos_token=source.bos_token,
        eos_token=source.eos_token,
        # The variables snapllm passes for a request without a reasoning_effort (a thinking switch on, as
        # llama-server sets it), then the case's own.
        **{**detect_family(source.template).template_kwargs(None), **case.reference_variables},
    )
    return rendered[0][0]


def snapllm_prompt(source: FamilyTemplate, request: ChatCompletionRequest) -> str:
    renderer = ChatRenderer(
        source.template, bos_token=source.bos_token, eos_token=source.eos_token, stop=source.eos_token
    )
    # As OpenAIServing.prepare passes them: the family's reasoning switch, then the request's own variables.
    variables = {
        **detect_family(source.template).template_kwargs(request.reasoning_effort),
        **(request.chat_template_kwargs or {}),
    }
    return renderer.render(request, variables).prompt


def outcome(source: FamilyTemplate, case: Case) -> str:
    """How snapllm's rendering of ``case`` compares with the reference's."""
    request = parse_request({**case.body, "max_tokens": 8})
    family = detect_family(source.template)
    instructions = ""
    if request.tools and "tools" not in source.template and family.writes_calls(source.template):
        functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools]
        instructions = family.tool_calls.instructions(functions, parallel=True)
    elif request.tools and "tools" not in source.template:
        # The generic format: the tools in the system message, earlier calls and results as plain turns
        # (which the reference, dropping the tools, cannot be compared with).
        prompt = snapllm_prompt(source, request)
        functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools]
        assert generic_tool_instructions(functions, parallel=True) in prompt
        return "generic tools"
    elif any(m.tool_calls for m in request.messages) and not family.writes_calls(source.template):
        return "generic tools"  # earlier calls in the generic format, as plain turns
    try:
        expected = reference_prompt(source, case, instructions=instructions)
    except Exception as refused:
        with pytest.raises(InvalidRequestError) as error:
            snapllm_prompt(source, request)
        assert error.value.param == "messages"
        assert str(refused).split(":")[-1].strip() in str(error.value), (str(refused), str(error.value))
        return "both refuse"
    prompt = snapllm_prompt(source, request)
    return "equal" if prompt == expected else "differs"


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_snapllm_renders_each_template_as_the_reference_does(name):
    source = templates()[name]
    outcomes = {
        case_name: outcome(source, case) for case_name, case in CASES.items() if case.needs in source.template
    }
    assert "differs" not in outcomes.values(), outcomes


def test_every_template_renders_a_plain_chat_equal_to_the_reference():
    """No template is left out of the suite by a refusal or the generic format: the plain chat is equal."""
    for name in TEMPLATE_NAMES:
        source = templates()[name]
        case = CASES["multi-turn"] if name != "hermes3" else CASES["tools"]
        assert outcome(source, case) == "equal", name


def test_each_template_of_the_corpus_is_claimed_by_one_family_at_most():
    # The registry's order decides nothing: a template that held two families' markers would otherwise be
    # the first one's by a rule nobody reads (Qwen3's templates hold Hermes' <tool_call>, Granite 4's too).
    corpus = {path.name: path.read_text() for path in sorted(corpus_folder().glob("*.jinja"))}
    sources = {**corpus, **{name: source.template for name, source in templates().items()}}
    claims = {name: [f.name for f in FAMILIES if f.matches(text, "")] for name, text in sources.items()}
    assert len(corpus) >= 60
    assert {name: found for name, found in claims.items() if len(found) > 1} == {}
    # What each family's own templates are claimed as.
    assert claims["Qwen-Qwen3-0.6B.jinja"] == ["qwen3"] and claims["Qwen-QwQ-32B.jinja"] == ["qwen3"]
    assert claims["StepFun3.5-Flash.jinja"] == ["hermes-thinking"]
    assert claims["Qwen-Qwen2.5-7B-Instruct.jinja"] == ["hermes"]
    assert claims["ibm-granite-granite-4.0.jinja"] == ["hermes"]
    assert claims["ibm-granite-granite-3.3-2B-Instruct.jinja"] == ["granite"]
    assert claims["Mistral-Small-3.2-24B-Instruct-2506.jinja"] == ["mistral-args"]
    assert claims["mistralai-Mistral-Nemo-Instruct-2407.jinja"] == ["mistral"]
    assert claims["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"] == ["deepseek-r1"]


def test_deepseek_r1s_templates_write_its_calls_though_they_take_no_tools():
    """R1's templates describe no tools, but write earlier calls and results in R1's markup: snapllm serves
    R1's format with them (the tool cases above compare its rendering of them with the reference's). V3.1's
    template, claimed by the same family, writes calls of another shape: it keeps the generic format."""
    corpus = corpus_folder()
    for name in ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"):
        template = (corpus / f"{name}.jinja").read_text()
        assert "tools" not in template and detect_family(template).writes_calls(template), name
    v31 = (corpus / "deepseek-ai-DeepSeek-V3.1.jinja").read_text()
    assert detect_family(v31).name == "deepseek-r1" and not detect_family(v31).writes_calls(v31)
    source = templates()["deepseek-r1-distill"]
    assert outcome(source, CASES["tool call + result, no tools"]) == "equal"
    assert outcome(source, CASES["tool call + result"]) == "equal"
