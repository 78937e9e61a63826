"""`snapllm cost`: the packaged price file, a hand-checked example, the verdict, the JSON and the PNG."""

from __future__ import annotations

import json
import struct
from dataclasses import replace

import pytest

from snapllm_dev.cli import main
from snapllm_dev.cost import measured, prices
from snapllm_dev.cost.model import (
    Speed,
    Workload,
    always_on_monthly,
    break_even,
    estimate,
    lambda_monthly,
    request_seconds,
    restores_per_day,
    streams_of,
)

PRICES = prices.load()
# The hand-checked workload: 10,000 requests/day spread evenly, 200 prompt + 100 completion tokens, a model
# that takes 0.5 s to the first token and decodes 20 tokens/s, a cold start adding 1.0 s of billed time.
WORKLOAD = Workload.flat(10_000, prompt_tokens=200, completion_tokens=100, memory_mb=10_240)
SPEED = Speed(tokens_per_s=20.0, ttft_s=0.5, cold_extra_s=1.0)


def test_price_file_dates_and_sources_every_price():
    assert PRICES.hours_per_month == 730
    lam = PRICES.lambda_
    for sourced in (lam.requests, lam.arm64, lam.x86_64, lam.snapstart, *PRICES.always_on):
        assert sourced.region == "us-east-1"
        assert sourced.date[:2] == "20" and sourced.source.startswith("https://aws.amazon.com/")
    assert {o.name for o in PRICES.always_on} >= {"c7g.2xlarge", "c8g.2xlarge", "g5.xlarge", "g6.xlarge"}
    assert lam.arm64.first_tier_usd_per_gb_s == 0.0000133334


def test_duration_tiers_apply_in_order():
    arm = PRICES.lambda_.arm64
    # 7.5 B GB-s at the first price, 11.25 B at the second, then the third.
    assert arm.cost(1e9) == pytest.approx(1e9 * 0.0000133334)
    total = 7.5e9 * 0.0000133334 + 11.25e9 * 0.0000120001 + 1e9 * 0.0000106667
    assert arm.cost(7.5e9 + 11.25e9 + 1e9) == pytest.approx(total)


def test_hand_checked_lambda_arm64_10240_mb_against_c7g_2xlarge():
    # One request: 0.5 s to the first token + 100 tokens / 20 tokens/s = 5.5 s billed, at 10,240 MB = 10 GB.
    assert request_seconds(WORKLOAD, SPEED) == 5.5
    # A month is 730 h = 30.4167 days: 10,000 x 730 / 24 = 304,166.67 requests.
    requests = 10_000 * 730 / 24
    # Each hour 416.67 requests keep 416.67 x 5.5 / 3600 = 0.64 environments busy: one environment, which
    # restores every 15 minutes: 4 restores an hour, 96 a day, 96 x 30.4167 = 2,920 a month.
    assert restores_per_day(WORKLOAD, SPEED) == 96
    restores = 96 * 730 / 24
    assert restores == pytest.approx(2920)
    # GB-s: 304,166.67 x 5.5 s x 10 GB + 2,920 restores x 1.0 s x 10 GB = 16,729,166.7 + 29,200 = 16,758,366.7
    gb_s = requests * 5.5 * 10 + 2920 * 1.0 * 10
    assert gb_s == pytest.approx(16_758_366.67)
    duration = gb_s * 0.0000133334  # all within the first tier (7.5 B GB-s): $223.45
    request_charge = requests / 1e6 * 0.20  # $0.06
    cache = 10 * 730 * 3600 * 0.0000015046  # one live version, 10 GB all month: $39.54
    restore = 2920 * 10 * 0.0001397998  # $4.08
    cost = lambda_monthly(PRICES, WORKLOAD, SPEED)
    assert cost.duration == pytest.approx(duration) and duration == pytest.approx(223.45, abs=0.005)
    assert cost.requests == pytest.approx(request_charge) and request_charge == pytest.approx(0.06, abs=0.005)
    assert cost.snapstart_cache == pytest.approx(cache) and cache == pytest.approx(39.54, abs=0.005)
    assert cost.snapstart_restore == pytest.approx(restore) and restore == pytest.approx(4.08, abs=0.005)
    assert cost.total == pytest.approx(267.13, abs=0.005)

    # c7g.2xlarge on demand: $0.289/h x 730 h = $210.97; one instance is 10,000 x 5.5 / 86,400 = 64% busy.
    c7g = PRICES.option("c7g.2xlarge")
    instance = always_on_monthly(PRICES, c7g, "on_demand", WORKLOAD, SPEED)
    assert instance.units == 1
    assert instance.total == pytest.approx(0.289 * 730) and instance.total == pytest.approx(210.97)
    assert instance.utilization == pytest.approx(10_000 * 5.5 / 86_400)

    # Break-even: Lambda's fixed part (cache $39.54 + restores $4.08 + their 29,200 GB-s $0.39 = $44.01)
    # plus per daily request 30.4167 x (5.5 x 10 x 0.0000133334 + 0.0000002) = $0.0223118 a month
    # reaches $210.97 at (210.97 - 44.01) / 0.0223118 = 7,483 requests/day, where the c7g is 47.6% busy.
    fixed = cache + restore + 29_200 * 0.0000133334
    per_daily_request = 730 / 24 * (5.5 * 10 * 0.0000133334 + 0.20 / 1e6)
    expected = (0.289 * 730 - fixed) / per_daily_request
    assert expected == pytest.approx(7483, abs=1)
    point = break_even(PRICES, c7g, "on_demand", WORKLOAD, SPEED)
    assert point is not None
    assert point.requests_per_day == pytest.approx(expected, abs=1)
    assert point.utilization == pytest.approx(expected * 5.5 / 86_400, rel=1e-3)
    assert point.utilization == pytest.approx(0.476, abs=0.001)


def test_verdict_names_the_cheaper_side():
    low = estimate(PRICES, WORKLOAD.at_volume(1_000), SPEED)
    assert low.verdict().startswith("At 1,000 requests/day, stay on Lambda")
    high = estimate(PRICES, WORKLOAD, SPEED)
    cheapest = high.cheapest
    assert cheapest.cost.total < high.lambda_cost.total
    assert high.verdict().startswith(f"At 10,000 requests/day, move to {cheapest.cost.label}")


def test_a_daily_profile_needs_more_units_at_its_peak():
    # The same 10,000 requests squeezed into 8 busy hours: 1,250 an hour keep 1.9 generations running.
    busy_day = Workload(
        hourly_requests=(0.0,) * 8 + (1250.0,) * 8 + (0.0,) * 8, prompt_tokens=200, completion_tokens=100
    )
    c7g = PRICES.option("c7g.2xlarge")
    assert always_on_monthly(PRICES, c7g, "on_demand", busy_day, SPEED).units == 2
    # Idle hours restore nothing; each busy hour has 2 environments restoring 4 times.
    assert restores_per_day(busy_day, SPEED) == 8 * 2 * 4


def test_speed_from_bench_coldstart_json():
    result = {
        "lifecycle": {
            "restore_s": 0.01,
            "first_invoke_s": 0.41,
            "warm_invoke_s": 0.27,
            "warm_first_token_ms": 40.0,
            "warm_tokens_per_s": 120.0,
            "prompt_tokens": 37,
        }
    }
    speed = measured.speed_from_bench(result)
    assert speed == Speed(
        tokens_per_s=120.0, ttft_s=0.04, ttft_prompt_tokens=37, cold_extra_s=pytest.approx(0.15)
    )
    # `snapllm bench aws --json` carries its speed under "speed".
    aws = {"speed": {"tokens_per_s": 90.0, "ttft_ms": 120.0, "prompt_tokens": 39, "cold_extra_ms": 650.0}}
    assert measured.speed_from_bench(aws) == Speed(
        tokens_per_s=90.0, ttft_s=0.12, ttft_prompt_tokens=39, cold_extra_s=0.65
    )
    with pytest.raises(measured.NoSpeedError, match="no speed"):
        measured.speed_from_bench({"lifecycle": {"restore_s": 0.01}})


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_cli_prints_json_and_writes_the_plot(tmp_path, capsys):
    png = tmp_path / "cost.png"
    code = main(
        ["cost", "--requests-per-day", "10000", "--prompt-tokens", "200", "--completion-tokens", "100",
         "--tokens-per-s", "20", "--ttft-ms", "500", "--cold-extra-ms", "1000", "--plot", str(png), "--json"]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["lambda"]["total"] == pytest.approx(267.13, abs=0.005)
    c7g = next(o for o in result["always_on"] if o["option"] == "c7g.2xlarge" and o["term"] == "on_demand")
    assert c7g["break_even"]["requests_per_day"] == pytest.approx(7483, abs=1)
    assert result["verdict"].startswith("At 10,000 requests/day, move to")
    width, height = _png_size(png.read_bytes())
    assert width >= 800 and height >= 500


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests-per-day", "100"], "give the speed"),
        (["--requests-per-day", "0", "--tokens-per-s", "5", "--ttft-ms", "1"], "must be above 0"),
        (["--profile", "1,2,3", "--tokens-per-s", "5", "--ttft-ms", "1"], "24 hourly counts, got 3"),
        (
            ["--requests-per-day", "9", "--tokens-per-s", "5", "--ttft-ms", "1", "--memory-mb", "20000"],
            "128-10240",
        ),
        (
            ["--requests-per-day", "9", "--tokens-per-s", "5", "--ttft-ms", "1", "--option", "m9.huge"],
            "no always-on",
        ),
    ],
)
def test_cli_refuses_bad_input_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cost", "--no-plot", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_cpu_streams_follow_the_lambda_memory_setting():
    c7g, g5 = PRICES.option("c7g.2xlarge"), PRICES.option("g5.xlarge")
    # 10,240 MB is 6 vCPUs: one generation per 6 of the c7g's 8. 2,048 MB is one vCPU: 8 generations.
    assert streams_of(c7g, WORKLOAD) == 1
    small = Workload.flat(10_000, prompt_tokens=200, completion_tokens=100, memory_mb=2048)
    assert streams_of(c7g, small) == 8
    assert streams_of(g5, small) == streams_of(g5, WORKLOAD) == 8  # a GPU's streams are its own
    assert streams_of(c7g, replace(small, vcpus_per_stream=2)) == 4
