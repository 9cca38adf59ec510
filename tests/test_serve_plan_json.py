"""serve plan --json: goodput at the target rate (not null when SLOs are set), a note when a
finite run drains below the arrival rate; serve export points vLLM/SGLang at a checkpoint
directory, never at a config.json."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.cli.commands.serve_plan import hub_repo

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_json() -> dict:
    out = runner.invoke(app, ["serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--request-rate", "4", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
                              "--num-requests", "200", "--max-gpus", "2", "--top", "1", "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_goodput_at_the_target_rate_is_reported(plan_json):
    best = plan_json["plans"][0]
    assert best["goodput_requests_per_s"] is not None
    assert best["metrics"]["goodput_requests_per_s"] == best["goodput_requests_per_s"]
    assert 0 < best["goodput_requests_per_s"] <= best["metrics"]["requests_per_s"] + 1e-9


def test_a_draining_finite_run_says_why_its_rate_is_below_the_target(plan_json):
    best = plan_json["plans"][0]
    if best["metrics"]["requests_per_s"] < 0.97 * plan_json["request_rate"]:
        assert best["notes"] and "drain" in best["notes"][0]
    else:
        assert best["notes"] == []


@pytest.mark.parametrize("name, expected", [
    ("./ckpt/config.json", "./ckpt"), ("ckpt/config.json", "./ckpt"), ("/m/llama/config.json", "/m/llama"),
    ("hf:Qwen/Qwen3-8B", "Qwen/Qwen3-8B"), ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
])
def test_engines_load_the_checkpoint_directory(name, expected):
    assert hub_repo(name) == expected
