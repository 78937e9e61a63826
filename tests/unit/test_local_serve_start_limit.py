"""The limit on each phase of ``snapllm local serve``'s streaming function start: ``--start-timeout``, else
``$SNAPLLM_LOCAL_START_TIMEOUT_S``, else one that grows with the model."""

from __future__ import annotations

import pytest

from snapllm.errors import ConfigurationError
from snapllm_dev.local.lwa import START_TIMEOUT_VARIABLE, default_start_timeout_s
from snapllm_dev.local.serve_cli import start_timeout_s


def test_the_flag_wins_then_the_variable_then_the_models_size():
    assert start_timeout_s(30.0, {START_TIMEOUT_VARIABLE: "5"}) == 30.0
    assert start_timeout_s(None, {START_TIMEOUT_VARIABLE: " 45.5 "}) == 45.5
    assert start_timeout_s(None, {START_TIMEOUT_VARIABLE: ""}) is None
    assert start_timeout_s(None, {}) is None


@pytest.mark.parametrize("value", ["0", "-1", "nan", "ten", "3601"])
def test_a_bad_variable_is_a_configuration_error_naming_it(value):
    with pytest.raises(ConfigurationError, match=f"^{START_TIMEOUT_VARIABLE} must be"):
        start_timeout_s(None, {START_TIMEOUT_VARIABLE: value})


def test_the_default_grows_with_the_model():
    # The packaged 98 MB SmolLM2, a 491 MB model (whose warm-up took over 120 s on a busy 2-core machine),
    # and a 1 B model's 770 MB.
    assert round(default_start_timeout_s(98_000_000)) == 149
    assert round(default_start_timeout_s(491_000_000)) == 267
    assert round(default_start_timeout_s(770_000_000)) == 351
