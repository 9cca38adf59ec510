"""train plan answers in the user's units: USD per step / per million tokens / per run and days
to train, in the table and the JSON, checked against hand arithmetic."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.training.search.economics import economics

runner = CliRunner()
ARGS = ["train", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64",
        "--global-batch-size", "128", "--top", "3"]


def test_economics_by_hand():
    m = economics(1000.0, 8.0, 64, price_per_gpu_hour=2.0, train_tokens=1e12)
    usd_per_s = 2.0 * 64 / 3600
    assert m["usd_per_step"] == pytest.approx(usd_per_s * 8.0)
    assert m["usd_per_million_tokens"] == pytest.approx(usd_per_s / 64_000 * 1e6)
    assert m["time_to_train_days"] == pytest.approx(1e12 / 64_000 / 86_400)
    assert m["run_gpu_hours"] == pytest.approx(1e12 / 64_000 * 64 / 3600)
    assert m["run_usd"] == pytest.approx(m["run_gpu_hours"] * 2.0)
    bare = economics(1000.0, 8.0, 64, None, None)
    assert bare["usd_per_step"] is None and bare["time_to_train_days"] is None


def test_json_has_named_cost_and_time_fields_and_the_score_unit():
    out = runner.invoke(app, [*ARGS, "--objective", "cost", "--price-per-gpu-hour", "2.5",
                              "--train-tokens", "1e12", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["score_unit"] == "USD per million tokens"
    best = data["plans"][0]
    # the objectives count goodput: the score is the failure-free figure times wall over training
    real = best["goodput_detail"]
    assert best["score"] == pytest.approx(
        best["usd_per_million_tokens"] * real["usd"] / real["usd_without_failures"])
    assert best["run_usd"] == pytest.approx(best["run_gpu_hours"] * 2.5)
    assert real["usd_without_failures"] == pytest.approx(best["run_usd"])
    days = json.loads(runner.invoke(app, [*ARGS, "--objective", "time-to-train", "--train-tokens",
                                          "1e12", "--json"]).stdout)["plans"][0]
    assert days["score"] == pytest.approx(days["goodput"]["days_to_train"])
    assert days["score"] > days["time_to_train_days"] and days["usd_per_step"] is None


def test_table_shows_dollars_and_days():
    out = runner.invoke(app, [*ARGS, "--price-per-gpu-hour", "2.5", "--train-tokens", "1e12"])
    assert out.exit_code == 0, out.output
    for column in ("USD/step", "USD/Mtok", "days to train", "run USD"):
        assert column in out.stdout


@pytest.mark.parametrize("extra, message", [
    (["--objective", "cost"], "--objective cost needs --price-per-gpu-hour"),
    (["--objective", "time-to-train"], "--objective time-to-train needs --train-tokens"),
    (["--price-per-gpu-hour", "-1"], "--price-per-gpu-hour -1.0: give a price per GPU-hour of 0.0001 USD or more"),
    (["--train-tokens", "nan"], "--train-tokens nan: give a finite number"),
])
def test_missing_or_meaningless_inputs_exit_2(extra, message):
    out = runner.invoke(app, [*ARGS, *extra])
    assert out.exit_code == 2 and message in out.output, out.output
