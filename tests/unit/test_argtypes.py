"""The commands' argument types, ``$PORT`` and the variables checked before a local stack starts."""

from __future__ import annotations

import argparse

import pytest

from snapllm.errors import ConfigurationError
from snapllm_dev.argtypes import (
    gguf_file,
    http_url,
    integer,
    integers,
    named_url,
    number,
    pair,
    parameter,
    port,
)
from snapllm_dev.local.environment import check_strict_variables
from snapllm_dev.local.serve_cli import DEFAULT_PORT, listening_port


@pytest.mark.parametrize("text", ["0", "65536", "99999", "-1", "abc", "", "3.5"])
def test_a_port_outside_1_to_65535_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="port number"):
        port(text)


def test_ports_and_whole_numbers_within_range_pass():
    assert port("3000") == 3000 and port(" 1 ") == 1 and port("65535") == 65535
    assert integer(1, 10)("10") == 10


@pytest.mark.parametrize("text", ["0", "11", "-1", "1e3", "x", "nan"])
def test_a_whole_number_out_of_range_or_malformed_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        integer(1, 10)(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e300", "-1", "x", ""])
def test_a_number_must_be_finite_and_within_range(text):
    with pytest.raises(argparse.ArgumentTypeError):
        number(0, 1e6)(text)


def test_above_minimum_excludes_the_minimum():
    assert number(0, 1)("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
        number(0, 1, above_minimum=True)("0")


def test_pairs_parameters_and_urls():
    assert pair(" a = b ") == ("a", "b")
    for bad in ("a", "=b", "a=", " = "):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
            pair(bad)
    assert parameter("ModelSource=") == ("ModelSource", "")  # sam deploy takes an empty value
    with pytest.raises(argparse.ArgumentTypeError):
        parameter("=x")
    assert named_url("gpt=http://127.0.0.1:8000/v1") == ("gpt", "http://127.0.0.1:8000/v1")
    for bad in ("localhost:8000", "ftp://host/x", "http://", "http://host:99999/"):
        with pytest.raises(argparse.ArgumentTypeError, match="URL"):
            http_url(bad)


def test_a_gguf_file_is_known_by_its_magic(tmp_path, model_path):
    assert gguf_file(str(model_path)) == model_path
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "text.gguf").write_text("not a model")
    for name, message in (("empty.gguf", "is empty"), ("text.gguf", "not a GGUF"), ("absent", "no file")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            gguf_file(str(tmp_path / name))
    with pytest.raises(argparse.ArgumentTypeError, match="is not a file"):
        gguf_file(str(tmp_path))


def test_port_comes_from_the_flag_then_the_variable_then_the_default():
    assert listening_port(8080, {"PORT": "abc"}) == 8080
    assert listening_port(None, {"PORT": " 9000 "}) == 9000
    assert listening_port(None, {"PORT": " "}) == listening_port(None, {}) == DEFAULT_PORT
    for bad in ("abc", "0", "70000"):
        with pytest.raises(ConfigurationError, match=rf"PORT must be a port number .*'{bad}'"):
            listening_port(None, {"PORT": bad})


def test_variables_powertools_parses_strictly_are_checked_by_name():
    check_strict_variables(
        {"POWERTOOLS_LOG_LEVEL": "debug", "POWERTOOLS_DEV": "", "POWERTOOLS_TRACE_DISABLED": "1"}
    )
    check_strict_variables({"POWERTOOLS_LOGGER_SAMPLE_RATE": "0.5", "SNAPLLM_LOG_LEVEL": "INFO"})
    with pytest.raises(ConfigurationError) as refused:
        check_strict_variables(
            {
                "POWERTOOLS_LOG_LEVEL": "loud",
                "POWERTOOLS_LOGGER_SAMPLE_RATE": "nan",
                "POWERTOOLS_METRICS_DISABLED": "maybe",
                "SNAPLLM_LOG_LEVEL": "x",
            }
        )
    message = str(refused.value)
    for name in (
        "POWERTOOLS_LOG_LEVEL",
        "POWERTOOLS_LOGGER_SAMPLE_RATE",
        "POWERTOOLS_METRICS_DISABLED",
        "SNAPLLM_LOG_LEVEL",
    ):
        assert name in message
    assert "\n" not in message


def test_a_list_of_whole_numbers_is_comma_separated_within_range_and_without_repeats():
    assert integers(1, 8)("1,2, 6") == [1, 2, 6]
    assert integers(1, 8)("4") == [4]
    for bad in ("", "1,,2", "0,1", "1,9", "a", "2,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            integers(1, 8)(bad)
