"""scripts/tail_shape.py splits P99 errors into the mean's error and the P99/mean shape's error."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("tail_shape", ROOT / "scripts/tail_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(rid: str, metric: str, measured: float, predicted: float) -> dict:
    return {"id": rid, "kind": "serving", "metric": metric, "measured": measured, "predicted": predicted,
            "rel_error": predicted / measured - 1}


def _report() -> dict:
    rows = []
    # a: the mean is half the measured one, the tail has the right shape (P99 = 2 x mean both ways)
    rows += [_row("a", "ttft_ms_mean", 100, 50), _row("a", "ttft_ms_p99", 200, 100)]
    # b: the mean is right, the tail too light (measured P99 = 3 x mean, predicted 1.5 x mean)
    rows += [_row("b", "ttft_ms_mean", 100, 100), _row("b", "ttft_ms_p99", 300, 150)]
    rows += [_row("a", "tpot_ms_mean", 10, 20), _row("a", "tpot_ms_p99", 11, 22),
             _row("a", "output_tokens_per_s", 1000, 900)]
    return {"records": rows}


def test_mean_and_shape_errors_are_told_apart():
    script = _script()
    table = script.decompose(script.pairs(_report()))
    assert table["ttft p99"]["median_signed"] == pytest.approx(-0.5)
    assert table["ttft mean"]["median_signed"] == pytest.approx(-0.25)  # median of -0.5 and 0
    assert table["ttft shape"]["median_signed"] == pytest.approx(-0.25)  # median of 0 and -0.5
    assert table["tpot shape"] == {"n": 1, "median_abs": pytest.approx(0.0), "median_signed": pytest.approx(0.0)}
    assert table["tpot mean"]["median_signed"] == pytest.approx(1.0)


def test_sustained_keeps_runs_within_k_times_their_ttft_limit():
    script = _script()
    values = script.pairs(_report())
    limits = {"a": 90.0, "b": 90.0}
    assert script.sustained(values, limits, 2.0) == ["a", "b"]
    assert script.sustained(values, limits, 1.5) == ["a"]  # b predicts 150 ms > 1.5 x 90
    table = script.decompose(values, script.sustained(values, limits, 1.5))
    assert table["ttft shape"]["n"] == 1 and table["ttft shape"]["median_signed"] == pytest.approx(0.0)


def test_sustained_without_records_is_an_error(tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report()))
    with pytest.raises(SystemExit) as exc:
        _script().main([str(report), "--sustained", "3"])
    assert exc.value.code == 2
    assert "--sustained needs --records" in capsys.readouterr().err
    assert _script().main([str(report)]) == 0


RECORD = """schema: 1
records:
- id: {rid}
  kind: serving
  source: {{name: a test, key: test, url: https://example.org, confidence: primary}}
  model: llama-2-70b
  hardware: {{gpu: h100-sxm-80gb, num_gpus: 8, gpus_per_node: 8}}
  serving:
    engine: vllm
    workload: {{mode: poisson, input_len: 222, output_len: 301, request_rate: 10.0, num_requests: 100}}
    {slo}
  measured: {{ttft_ms_p99: 400.0}}
"""


def test_ttft_limits_come_from_each_records_slo(tmp_path):
    path = tmp_path / "records.yaml"
    with_slo = RECORD.format(rid="with", slo="slo: {ttft_ms: 450.0, tpot_ms: 40.0, percentile: 99}")
    without = RECORD.format(rid="without", slo="")
    path.write_text(with_slo + without.split("records:\n", 1)[1])
    assert _script().ttft_limits(path) == {"with": 450.0}
