"""serve plan keeps the model's own precision unless quantization is asked for (issue #34):
quantized weights or KV cache change the model's outputs, so fp8 plans need --quantization,
and then the best plan at the model's own precision is shown next to the best quantized one."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()
PLAN = ("serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--request-rate", "6",
        "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--num-requests", "150", "--max-gpus", "2",
        "--no-disaggregation", "--workers", "1", "--top", "2", "--json")


def plans(*extra: str) -> list[dict]:
    out = runner.invoke(app, [*PLAN, *extra])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["plans"]


@pytest.mark.parametrize("extra", [(), ("--no-quantization",)], ids=["default", "old-flag"])
def test_plans_keep_the_models_dtypes_by_default(extra):
    found = plans(*extra)
    assert found
    for p in found:
        assert (p["plan"]["weights_dtype"], p["plan"]["kv_cache_dtype"]) == ("bf16", "auto")
        assert p["quantized"] is False


def test_quantization_is_opt_in_and_shows_both_precisions():
    found = plans("--quantization")
    assert any(p["quantized"] for p in found)
    native = [p for p in found if not p["quantized"]]
    assert native and native[0]["plan"]["weights_dtype"] == "bf16"
    assert native[0]["plan"]["kv_cache_dtype"] == "auto"


def test_the_table_names_the_best_plan_of_each_precision():
    out = runner.invoke(app, [a for a in PLAN if a != "--json"] + ["--quantization"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())
    assert "Best at the model's own precision: tp" in text and "best quantized (changes the model's outputs)" in text
