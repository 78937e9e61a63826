"""``snapllm local serve --api-key`` plays ApiAuth=KEY on the whole local path: the HTTP API's authorizer (in
the gateway) before the router, and the streaming app's own check. The official ``openai`` client and
LangChain's ``ChatOpenAI`` get in with ``base_url`` and ``api_key`` alone; a wrong key gets OpenAI's 401."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL, SERVE_ENV, ServeProcess

pytestmark = pytest.mark.slow

KEY = "sk-local-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Say hello in three words."}]


@pytest.fixture(scope="module")
def keyed() -> Iterator[ServeProcess]:
    with ServeProcess.start(template=TEMPLATE, env=SERVE_ENV, api_key=KEY) as running:
        yield running


def client(server: ServeProcess, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=120)


def test_the_openai_client_with_the_key_lists_chats_and_streams(keyed):
    sdk = client(keyed, KEY)
    assert [m.id for m in sdk.models.list().data] == [MODEL]
    completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6)
    assert completion.choices[0].message.content.strip()
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()


@pytest.mark.parametrize("call", ["models", "chat", "stream"])
def test_a_wrong_key_gets_openais_401_on_every_path(keyed, call):
    sdk = client(keyed, KEY + "x")
    with pytest.raises(openai.AuthenticationError) as refused:
        if call == "models":
            sdk.models.list()
        else:
            sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, stream=call == "stream")
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key" and refused.value.type == "invalid_request_error"
    assert (
        refused.value.body["param"] is None and refused.value.body["message"] == "Incorrect API key provided"
    )
    assert refused.value.response.headers["www-authenticate"] == "Bearer"


def test_without_a_header_the_http_api_answers_as_api_gateway_and_the_stream_as_openai(keyed):
    # API Gateway refuses a request without the authorizer's identity source itself, before any function.
    bare = httpx.get(f"{keyed.base_url}/models", timeout=30)
    assert bare.status_code == 401 and bare.json() == {"message": "Unauthorized"}
    # The Function URL is public with KEY: the streaming app refuses in OpenAI's shape.
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    streamed = httpx.post(f"{keyed.base_url}/chat/completions", json=body, timeout=30)
    assert streamed.status_code == 401
    assert streamed.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer" in streamed.json()["error"]["message"]


def test_langchain_chat_openai_with_the_key_invokes_and_streams(keyed):
    model = ChatOpenAI(model=MODEL, base_url=keyed.base_url, api_key=KEY, max_tokens=6, max_retries=0)
    assert model.invoke("Say hi.").content.strip()
    assert "".join(str(chunk.content) for chunk in model.stream("Say hi.")).strip()
    wrong = ChatOpenAI(model=MODEL, base_url=keyed.base_url, api_key="sk-wrong", max_tokens=4, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.invoke("Say hi.")
