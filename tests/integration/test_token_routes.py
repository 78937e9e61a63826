"""``/tokenize``, ``/detokenize`` and ``/v1/chat/completions/input_tokens`` with the packaged model: on the
protocol over a loaded engine, through the inference function's direct invoke, and over HTTP from
``snapllm local serve`` (gateway, router, restored function)."""

from __future__ import annotations

import httpx
import pytest

from snapllm.errors import ContextLengthExceededError, InvalidRequestError, UnknownModelError
from snapllm.protocol.http.routes import CHAT_INPUT_TOKENS, DETOKENIZE, TOKENIZE, routed_event
from snapllm.protocol.model_routes.model_routes import ModelRoutes
from snapllm.protocol.requests import ChatCompletionRequest
from tests.support.serve import MODEL, SERVER_GROUP

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SERVER_GROUP)]

TEXT = "Hello, world! Ünïcode and <|im_start|> too."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def routes(engine, serving) -> ModelRoutes:
    return ModelRoutes(model_name=engine.model_name, vocabulary=engine, serving=serving, max_chars=1000)


def test_tokenize_then_detokenize_gives_the_text_back(routes, engine):
    tokens = routes.answer(TOKENIZE, {"content": TEXT})["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert routes.answer(DETOKENIZE, {"tokens": tokens}) == {"content": TEXT}
    # A control token written in the text is one token unless the caller says it is text.
    im_start = engine.tokenize("<|im_start|>", add_bos=False)
    assert len(im_start) == 1 and im_start[0] in tokens
    as_text = routes.answer(TOKENIZE, {"content": TEXT, "parse_special": False})["tokens"]
    assert im_start[0] not in as_text and len(as_text) > len(tokens)


def test_with_pieces_names_each_tokens_text(routes):
    answer = routes.answer(TOKENIZE, {"content": "Hi there", "with_pieces": True})
    pieces = answer["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hi there"
    assert [p["id"] for p in pieces] == routes.answer(TOKENIZE, {"content": "Hi there"})["tokens"]


def test_add_special_adds_the_models_bos_only_when_asked(routes, engine):
    plain = routes.answer(TOKENIZE, {"content": "Hi"})["tokens"]
    special = routes.answer(TOKENIZE, {"content": "Hi", "add_special": True})["tokens"]
    assert special == engine.tokenize("Hi", add_bos=True)
    assert special[-len(plain) :] == plain


@pytest.mark.parametrize("bad", [-1, 10**9])
def test_token_ids_outside_the_vocabulary_are_refused_by_index(routes, engine, bad):
    with pytest.raises(InvalidRequestError) as refused:
        routes.answer(DETOKENIZE, {"tokens": [1, 2, bad]})
    assert refused.value.param == "tokens.2" and str(engine.n_vocab - 1) in refused.value.message
    with pytest.raises(InvalidRequestError):
        routes.answer(DETOKENIZE, {"tokens": [engine.n_vocab]})


def test_sizes_and_names_are_bounded(routes):
    with pytest.raises(InvalidRequestError) as refused:
        routes.answer(TOKENIZE, {"content": "a" * 1001})
    assert refused.value.param == "content"
    with pytest.raises(InvalidRequestError) as refused:
        routes.answer(DETOKENIZE, {"tokens": [1] * 40_000})
    assert refused.value.param == "tokens"
    with pytest.raises(UnknownModelError):
        routes.answer(TOKENIZE, {"content": "x", "model": "gpt-4o"})


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "Name three colours."}]},
        {
            "messages": [
                {"role": "system", "content": "Answer tersely."},
                {"role": "user", "content": "Weather in Paris? <|im_end|> is text here."},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
        },
    ],
    ids=["plain", "tools"],
)
def test_the_count_is_the_completions_prompt_tokens(routes, serving, body):
    counted = routes.answer(CHAT_INPUT_TOKENS, {**body, "max_tokens": 3})
    request = ChatCompletionRequest.model_validate({**body, "max_tokens": 3, "temperature": 0.0})
    generation = serving.generate(request)
    assert counted["object"] == "chat.completion.input_tokens"
    assert counted["input_tokens"] == generation.prompt_tokens
    assert counted["max_completion_tokens"] == 3 and counted["context_window"] == serving.engine.n_ctx


def test_a_prompt_that_does_not_fit_gets_the_completions_refusal(routes, serving):
    routes = ModelRoutes(
        model_name=serving.model_name, vocabulary=serving.engine, serving=serving, max_chars=10**6
    )
    words = " ".join(["word"] * 3000)
    with pytest.raises(ContextLengthExceededError) as refused:
        routes.answer(CHAT_INPUT_TOKENS, {"messages": [{"role": "user", "content": words}]})
    assert refused.value.param == "messages"


def test_the_direct_invoke_answers_routed_events(runtime):
    tokens = runtime.handle(routed_event(TOKENIZE, {"content": "Hello"}), None)["tokens"]
    assert runtime.handle(routed_event(DETOKENIZE, {"tokens": tokens}), None) == {"content": "Hello"}
    refused = runtime.handle({"route": "/v1/nothing", "body": {}}, None)
    assert refused["statusCode"] == 404
    refused = runtime.handle({"route": TOKENIZE, "body": {"content": "x"}, "extra": 1}, None)
    assert refused["statusCode"] == 400 and refused["error"]["param"] == "extra"


def test_local_serve_answers_the_token_routes_and_counts_what_the_completion_uses(server, client):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        tokens = http.post(TOKENIZE, json={"content": TEXT, "model": MODEL}).json()["tokens"]
        assert http.post(DETOKENIZE, json={"tokens": tokens}).json() == {"content": TEXT}
        messages = [{"role": "user", "content": "Say hello in three words."}]
        counted = http.post(CHAT_INPUT_TOKENS, json={"messages": messages})
        assert counted.status_code == 200, counted.text
        wrong = http.post(DETOKENIZE, json={"tokens": [-5]})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "tokens.0"
    completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    assert counted.json()["input_tokens"] == completion.usage.prompt_tokens
