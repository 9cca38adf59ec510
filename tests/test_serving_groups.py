"""benchmarks/serving_groups.py: serving errors per engine, GPU generation and quantity, with the
in-sample, leave-one-source-out and held-out figures kept apart; and the block that renders them
(benchmarks/readme_blocks.py). Synthetic rows only: fast, runs no simulation."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from tests.conftest import REPO


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


sg = _module("serving_groups")
rb = _module("readme_blocks")


def _row(rid: str, metric: str, error: float, engine: str = "vllm", arch: str = "hopper") -> dict:
    return {"id": rid, "metric": metric, "engine": engine, "architecture": arch, "error": error}


@pytest.mark.parametrize(("metric", "kind"), [
    ("output_tokens_per_s", "throughput"), ("requests_per_s", "throughput"), ("ttft_ms_mean", "ttft"),
    ("ttft_ms_p50", "ttft"), ("ttft_ms_p99", "ttft_tail"), ("ttft_ms_p90", "ttft_tail"),
    ("tpot_ms_mean", "tpot"), ("itl_ms_p50", "tpot"), ("e2e_ms_mean", "tpot"), ("tpot_ms_p99", "tpot_tail"),
    ("itl_ms_p99", "tpot_tail")])
def test_each_metric_lands_in_its_quantity(metric, kind):
    assert sg.quantity(metric) == kind


def test_residual_rows_split_calibration_from_held_out_and_undo_the_log():
    kinds = {"throughput": [{"id": "cal", "metric": "output_tokens_per_s", "engine": "vllm",
                             "architecture": "hopper", "residual": math.log(1.2), "source": "s"}],
             "ttft_tail": [{"id": "mlperf", "metric": "ttft_ms_p99", "engine": "tensorrt-llm",
                            "architecture": "blackwell", "residual": math.log(0.5), "source": "t"}]}
    out = sg.residual_rows(kinds, {"cal"})
    assert [r["id"] for r in out["loso"]] == ["cal"] and [r["id"] for r in out["held_out"]] == ["mlperf"]
    assert out["loso"][0]["error"] == pytest.approx(0.2)
    assert out["held_out"][0]["error"] == pytest.approx(-0.5)


def test_table_keeps_the_three_sets_and_the_quantities_apart():
    sets = {
        # the same record, fitted on (+1%) and predicted with its source left out (+30%)
        "in_sample": [_row("a", "output_tokens_per_s", 0.01), _row("a", "ttft_ms_mean", -0.02)],
        "loso": [_row("a", "output_tokens_per_s", 0.30), _row("a", "ttft_ms_mean", -0.40)],
        "held_out": [_row("m", "ttft_ms_p99", -0.6, "tensorrt-llm", "blackwell"),
                     _row("m", "tpot_ms_mean", 0.5, "tensorrt-llm", "blackwell"),
                     _row("m", "tpot_ms_p99", 0.7, "tensorrt-llm", "blackwell")],
    }
    t = sg.table(sets)
    hopper = t["vllm, hopper"]
    assert hopper["throughput"]["in_sample"]["median_abs_rel_error"] == pytest.approx(0.01)
    assert hopper["throughput"]["loso"]["median_abs_rel_error"] == pytest.approx(0.30)
    assert hopper["ttft"]["loso"]["signed_median"] == pytest.approx(-0.40)
    assert "held_out" not in hopper["throughput"] and "ttft_tail" not in hopper
    bw = t["tensorrt-llm, blackwell"]
    assert list(bw) == ["ttft_tail", "tpot", "tpot_tail"]  # in bands.serving.KINDS order
    assert bw["ttft_tail"]["held_out"]["signed_median"] == pytest.approx(-0.6)
    assert bw["tpot"]["held_out"]["signed_median"] == pytest.approx(0.5)
    assert bw["tpot_tail"]["held_out"]["signed_median"] == pytest.approx(0.7)
    assert t["all"]["throughput"]["loso"]["n"] == 1 and t["all"]["tpot_tail"]["held_out"]["n"] == 1


def test_a_record_counts_once_per_quantity_as_the_bands_count_it():
    rows = [_row("a", "requests_per_s", 0.9), _row("a", "output_tokens_per_s", 0.1),
            _row("a", "ttft_ms_p50", 0.8), _row("a", "ttft_ms_mean", 0.2), _row("b", "ttft_ms_p50", 0.4)]
    t = sg.table({"in_sample": rows})["vllm, hopper"]
    assert t["throughput"]["in_sample"] == {"n": 1, "median_abs_rel_error": pytest.approx(0.1),
                                            "p90_abs_rel_error": pytest.approx(0.1),
                                            "signed_median": pytest.approx(0.1)}
    assert t["ttft"]["in_sample"]["n"] == 2 and t["ttft"]["in_sample"]["median_abs_rel_error"] == pytest.approx(0.3)
    assert sg.metrics_of({"in_sample": rows}) == {"throughput": ["output_tokens_per_s"],
                                                  "ttft": ["ttft_ms_mean", "ttft_ms_p50"]}


def test_rendered_cells_are_in_sample_then_loso_then_held_out_with_dashes():
    sets = {"in_sample": [_row("a", "output_tokens_per_s", 0.01)],
            "loso": [_row("a", "output_tokens_per_s", -0.30)],
            "held_out": [_row("m", "output_tokens_per_s", 0.05, "vllm", "cdna3"),
                         _row("m", "ttft_ms_p99", -0.6, "vllm", "cdna3")]}
    acc = {"simulated": 1, "seconds": 5,
           "by_engine_generation": {"groups": sg.table(sets), "metrics": sg.metrics_of(sets),
                                    "residuals_date": "d1", "constants_fitted": "d0"}}
    text = rb.render_serving_groups(acc)
    assert "| engine, GPU generation | throughput | TTFT p99 |" in text
    assert "| vllm, hopper | 1.0% (1) / 30.0% (1) / — | — |" in text
    assert "| vllm, cdna3 | — / — / 5.0% (1) | — / — / 60.0% (1) |" in text
    assert "| vllm, hopper | +1.0% (1) / -30.0% (1) / — | — |" in text
    assert "took 5 s" in text
