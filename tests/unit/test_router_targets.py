"""Routing-table targets: Lambda aliases or always-on endpoints, fallback orders, the endpoint's API key."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from snapllm.aws_auth import secret_api_key
from snapllm.errors import ConfigurationError
from snapllm.inference.client import HttpInferenceClient, LambdaInferenceClient, is_endpoint
from snapllm.protocol.http.routes import (
    CHAT_INPUT_TOKENS,
    DETOKENIZE,
    EMBEDDINGS,
    RERANK,
    RERANK_ALIAS,
    TOKENIZE,
    routed_event,
)
from snapllm.router.app import RouterApp
from snapllm.router.settings import RouterSettings
from tests.support.http_stub import HttpStub, Reply

ARN = "arn:aws:lambda:us-east-1:123456789012:function:snapllm-Inference:live"
ROUTES = {"smollm2": ARN, "smollm2-always-on": "https://llm.internal.example/v1"}


def test_targets_are_routes_then_fallbacks():
    env = {
        "SNAPLLM_ROUTES": json.dumps(ROUTES),
        "SNAPLLM_FALLBACKS": json.dumps({"smollm2-always-on": ["smollm2"]}),
    }
    settings = RouterSettings.from_env(env)
    assert settings.targets("smollm2-always-on") == ("smollm2-always-on", "smollm2")
    assert settings.targets("smollm2") == ("smollm2",)
    assert is_endpoint(settings.routes["smollm2-always-on"]) and not is_endpoint(settings.routes["smollm2"])


@pytest.mark.parametrize(
    "fallbacks",
    [{"smollm2-always-on": ["nope"]}, {"nope": ["smollm2"]}, {"smollm2": ["smollm2"]}],
    ids=["unknown-target", "unknown-model", "itself"],
)
def test_a_fallback_must_name_other_routes(fallbacks):
    env = {"SNAPLLM_ROUTES": json.dumps(ROUTES), "SNAPLLM_FALLBACKS": json.dumps(fallbacks)}
    with pytest.raises(ConfigurationError, match="SNAPLLM_FALLBACKS"):
        RouterSettings.from_env(env)


@mock_aws  # Secrets Manager cannot run here; moto plays it in-process.
@pytest.mark.parametrize(("secret", "key"), [("sk-plain", "sk-plain"), ('{"api_key": "sk-json"}', "sk-json")])
def test_endpoint_api_key_from_secrets_manager(secret, key, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    arn = boto3.client("secretsmanager").create_secret(Name="endpoint-key", SecretString=secret)["ARN"]
    assert secret_api_key(arn) == key


@mock_aws
def test_from_env_builds_a_client_per_target_kind(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    arn = boto3.client("secretsmanager").create_secret(Name="k", SecretString="sk-test")["ARN"]
    monkeypatch.setenv("SNAPLLM_ROUTES", json.dumps(ROUTES))
    monkeypatch.setenv("SNAPLLM_ENDPOINT_SECRET_ARN", arn)
    router = RouterApp.from_env()
    assert isinstance(router.clients["smollm2"], LambdaInferenceClient)
    endpoint = router.clients["smollm2-always-on"]
    assert isinstance(endpoint, HttpInferenceClient)
    assert endpoint.base_url == "https://llm.internal.example/v1" and endpoint._api_key == "sk-test"


@pytest.mark.parametrize(
    ("route", "path"),
    [
        (EMBEDDINGS, "/v1/embeddings"),
        (RERANK, "/v1/rerank"),
        (RERANK_ALIAS, "/rerank"),
        (TOKENIZE, "/tokenize"),
        (DETOKENIZE, "/detokenize"),
        (CHAT_INPUT_TOKENS, "/v1/chat/completions/input_tokens"),
    ],
)
def test_an_endpoint_gets_routed_events_at_llama_servers_paths_with_the_body_alone(route, path):
    # An always-on llama-server (not built on test machines) that answers every POST with {"ok": true}.
    with HttpStub(lambda request: Reply(body={"ok": True})) as endpoint:
        client = HttpInferenceClient(f"{endpoint.base_url}/v1")
        assert client.invoke(routed_event(route, {"input": "x"})) == {"ok": True}
        assert client.invoke({"messages": []}) == {"ok": True}
    assert [(r.path, r.json()) for r in endpoint.requests] == [
        (path, {"input": "x"}),
        ("/v1/chat/completions", {"messages": []}),
    ]
