"""``snapllm local serve`` with a key plays ApiAuth=KEY on the whole local path: the HTTP API's authorizer (in
the gateway) before the router, and the streaming app's own check. The official ``openai`` client and
LangChain's ``ChatOpenAI`` get in with ``base_url`` and ``api_key`` alone; a wrong key gets OpenAI's 401.

The server here (:func:`~tests.support.serve.shared_keyed_server`, which the hostile-input table and the
embeddings share) takes its key from ``$SNAPLLM_API_KEY`` (``--api-key`` is what the reranker's server
takes) and serves CORS for one origin with ``--cors-origin``, as ``CorsAllowedOrigins`` does."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.support.procfs import command_line, descendants, listening_tcp_ports
from tests.support.serve import (
    API_KEY,
    CORS_ORIGIN,
    EMBEDDING_MODEL,
    KEYED_SERVER_GROUP,
    MODEL,
    ServeProcess,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(KEYED_SERVER_GROUP)]

KEY = API_KEY
MESSAGES = [{"role": "user", "content": "Say hello in three words."}]
APP = CORS_ORIGIN


def client(server: ServeProcess, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=120)


def test_the_openai_client_with_the_key_lists_chats_and_streams(keyed_server):
    sdk = client(keyed_server, KEY)
    assert {m.id for m in sdk.models.list().data} == {MODEL, EMBEDDING_MODEL}
    completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6)
    assert completion.choices[0].message.content.strip()
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()


@pytest.mark.parametrize("call", ["models", "chat", "stream"])
def test_a_wrong_key_gets_openais_401_on_every_path(keyed_server, call):
    sdk = client(keyed_server, KEY + "x")
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


def test_without_a_header_the_http_api_answers_as_api_gateway_and_the_stream_as_openai(keyed_server):
    # API Gateway refuses a request without the authorizer's identity source itself, before any function.
    bare = httpx.get(f"{keyed_server.base_url}/models", timeout=30)
    assert bare.status_code == 401 and bare.json() == {"message": "Unauthorized"}
    # The Function URL is public with KEY: the streaming app refuses in OpenAI's shape.
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    streamed = httpx.post(f"{keyed_server.base_url}/chat/completions", json=body, timeout=30)
    assert streamed.status_code == 401
    assert streamed.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer" in streamed.json()["error"]["message"]


def test_langchain_chat_openai_with_the_key_invokes_and_streams(keyed_server):
    model = ChatOpenAI(model=MODEL, base_url=keyed_server.base_url, api_key=KEY, max_tokens=6, max_retries=0)
    assert model.invoke("Say hi.").content.strip()
    assert "".join(str(chunk.content) for chunk in model.stream("Say hi.")).strip()
    wrong = ChatOpenAI(
        model=MODEL, base_url=keyed_server.base_url, api_key="sk-wrong", max_tokens=4, max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        wrong.invoke("Say hi.")


def test_the_key_from_the_environment_is_on_no_command_line_and_in_no_function(keyed_server):
    children = descendants(keyed_server.process.pid)
    assert children
    for pid in {keyed_server.process.pid, *children}:
        assert not any(KEY in arg for arg in command_line(pid))  # what `ps` shows every local user
    for pid in children:
        assert KEY.encode() not in Path(f"/proc/{pid}/environ").read_bytes()  # only its hash reaches them


def test_the_streaming_apps_port_is_a_socket_only_its_owner_reaches(keyed_server):
    # The app answers LWA's readiness check (/health) and the SnapStart hooks without a key, as only LWA
    # reaches it on AWS: locally it listens on no TCP port, on a unix socket in a folder of its owner's.
    (stream,) = [pid for pid in descendants(keyed_server.process.pid) if "app:app" in command_line(pid)]
    arguments = command_line(stream)
    assert "--port" not in arguments and listening_tcp_ports(stream) == set()
    folder = Path(arguments[arguments.index("--uds") + 1]).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    # The gateway's is the only TCP port the stack answers on (local S3 aside, which holds no key check).
    assert keyed_server.port in listening_tcp_ports(keyed_server.process.pid)


def test_cors_preflight_and_answers_carry_the_templates_headers(keyed_server):
    preflight = httpx.options(
        f"{keyed_server.base_url}/chat/completions",
        headers={
            "origin": APP,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type,x-stainless-os",
        },
        timeout=30,
    )
    # No key: the template's OPTIONS route has no authorizer, and the router answers the preflight.
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == APP
    assert preflight.headers["access-control-allow-methods"] == "GET,POST,OPTIONS"
    allowed = preflight.headers["access-control-allow-headers"].split(",")
    assert {"authorization", "content-type", "x-stainless-os"} <= set(allowed)
    assert preflight.headers["access-control-max-age"] == "600"
    keyed_headers = {"origin": APP, "authorization": f"Bearer {KEY}"}
    listed = httpx.get(f"{keyed_server.base_url}/models", headers=keyed_headers, timeout=30)
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == APP
    assert listed.headers["access-control-expose-headers"] == "x-request-id,retry-after"
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": True}
    with httpx.stream(
        "POST", f"{keyed_server.base_url}/chat/completions", json=body, headers=keyed_headers, timeout=120
    ) as streamed:
        assert streamed.status_code == 200 and "data: [DONE]" in streamed.read().decode()
    assert streamed.headers["access-control-allow-origin"] == APP
    assert streamed.headers["access-control-expose-headers"] == "x-request-id,retry-after"
    # Another origin gets no CORS header at all, and a preflight is no way in without a key.
    other = httpx.get(
        f"{keyed_server.base_url}/models", headers={**keyed_headers, "origin": "https://evil.example"}
    )
    assert other.status_code == 200 and not any(name.startswith("access-control-") for name in other.headers)
    bare_options = httpx.options(f"{keyed_server.base_url}/models", timeout=30)
    assert bare_options.status_code == 401
