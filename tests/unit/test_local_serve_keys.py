"""``snapllm local serve``'s keys and CORS, read before anything starts: ``$SNAPLLM_API_KEY`` and
``--api-keys-file`` (keys asked for and none found stops the start), and the template's CORS
configurations as ``--cors-origin`` sets its ``CorsAllowedOrigins``."""

from __future__ import annotations

import argparse

import pytest

from snapllm.errors import ConfigurationError
from snapllm_dev import sam
from snapllm_dev.local.arguments import origin
from snapllm_dev.local.cors import CORS_PARAMETER, CorsPolicies
from snapllm_dev.local.serve_cli import API_KEY_VARIABLE, served_keys
from tests.support.paths import TEMPLATE

APP = "http://localhost:5173"


def test_the_key_may_come_from_the_environment_and_a_file():
    assert served_keys([], None, {API_KEY_VARIABLE: " sk-env-1 "}) == ["sk-env-1"]
    assert served_keys(["sk-arg"], None, {}) == ["sk-arg"]


def test_a_keys_file_read_with_comments_and_blank_lines(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# the team's keys\n\nsk-one\n  sk-two  \n")
    assert served_keys([], path, {}) == ["sk-one", "sk-two"]


@pytest.mark.parametrize("text", ["", "# keys\n\n", "\n   \n\n"], ids=["empty", "comments", "blank-lines"])
def test_a_keys_file_with_no_key_stops_the_start_naming_the_file(tmp_path, text):
    path = tmp_path / "k.txt"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=f"--api-keys-file {path} holds no key"):
        served_keys([], path, {})
    with pytest.raises(ConfigurationError):  # a key elsewhere does not excuse an empty file
        served_keys(["sk-arg"], path, {})


@pytest.mark.parametrize("value", ["", "  ", "sk a"])
def test_a_blank_or_malformed_key_variable_stops_the_start(value):
    with pytest.raises(ConfigurationError, match=API_KEY_VARIABLE):
        served_keys([], None, {API_KEY_VARIABLE: value})


@pytest.mark.parametrize("text", ["https://app.example.com/", "app.example.com", "ftp://x", "https://a b"])
def test_an_origin_has_a_scheme_a_host_and_no_path(text):
    with pytest.raises(argparse.ArgumentTypeError):
        origin(text)
    assert origin("https://app.example.com:8443") == "https://app.example.com:8443" and origin("*") == "*"


def test_the_templates_cors_is_played_only_with_origins():
    assert CorsPolicies.of(sam.load(TEMPLATE)) == CorsPolicies()
    policies = CorsPolicies.of(sam.load(TEMPLATE, overrides={CORS_PARAMETER: f"{APP},https://b.example"}))
    assert policies.options_unauthenticated  # HttpApiPreflightRoute: a preflight carries no key
    api, url = policies.http_api, policies.function_url
    assert api is not None and url is not None
    assert api.allow_origins == url.allow_origins == (APP, "https://b.example")
    assert api.allow_methods == ("GET", "POST", "OPTIONS") and url.allow_methods == ("GET", "POST")
    preflight: dict[str, str] = {"access-control-allow-origin": "*"}  # the function's own: dropped
    api.apply({"origin": APP, "access-control-request-method": "POST"}, preflight, preflight=True)
    assert preflight["access-control-allow-origin"] == APP and preflight["access-control-max-age"] == "600"
    assert "authorization" in preflight["access-control-allow-headers"].split(",")
    answer: dict[str, str] = {}
    url.apply({"origin": APP}, answer, preflight=False)
    exposed = "x-request-id,retry-after"
    assert answer == {"access-control-allow-origin": APP, "access-control-expose-headers": exposed}
    other: dict[str, str] = {"access-control-allow-origin": "*"}
    api.apply({"origin": "https://evil.example"}, other, preflight=False)
    assert other == {}
