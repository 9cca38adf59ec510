"""benchmarks/serving_holdout.py: which held-out values it counts and how it groups them (the causes
issue #32 names), checked on synthetic rows; no simulation runs."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

from meshplan.records import HELD_OUT
from meshplan.validate.records import load_records
from meshplan.validate.run import Row
from tests.conftest import REPO

BENCHMARKS = REPO / "benchmarks"


def _module(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # serving_holdout imports readme_blocks by name
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _module("serving_holdout")


def _timed(mode: str, rate: float | None = None):
    return SimpleNamespace(serving=SimpleNamespace(workload=SimpleNamespace(mode=mode, request_rate=rate)))


def _row(rid: str, metric: str, measured: float, predicted: float) -> Row:
    return Row(rid, "serving", metric, measured, predicted, predicted / measured - 1, 0.5 * measured, 2 * measured)


def test_a_timed_run_counts_only_if_both_the_simulation_and_the_published_run_kept_up():
    records = {"kept": _timed("poisson", 10.0), "slow-sim": _timed("poisson", 10.0),
               "overloaded": _timed("poisson", 100.0), "loop": _timed("concurrency")}
    rows = [_row("kept", "requests_per_s", 9.9, 10.0), _row("slow-sim", "requests_per_s", 9.9, 8.0),
            _row("overloaded", "requests_per_s", 1.25, 1.9), _row("loop", "requests_per_s", 3.0, 3.0)]
    assert bench.sustained_ids(rows, records) == {"kept"}
    latency = {rid: _row(rid, "tpot_ms_mean", 10.0, 12.0) for rid in records}
    counted = {rid for rid, r in latency.items() if bench.counted("tpot", r, {"kept"}, records)}
    assert counted == {"kept", "loop"}  # a closed loop has no queue growing with its length
    assert all(bench.counted("throughput", r, set(), records) for r in latency.values())


def test_held_out_engine_records_are_grouped_by_the_causes_of_issue_32():
    records = {r.id: r for r in load_records(HELD_OUT / "serving-engines-2025.yaml")}
    assert bench.cause_key(records["lmsys-sglang-h100-dsv3-prefill-ep32-2k"]) == "disaggregated prefill, MoE"
    assert bench.cause_key(records["lmsys-sglang-h100-dsv3-decode-ep72-2k"]) == "disaggregated decode, MoE"
    assert bench.cause_key(records["trtllm-blog1-b200-dsr1-c1-baseline-ep8tp8"]) == "aggregated, MoE"
    mlperf = load_records(HELD_OUT / "mlperf-inference-v5.1.yaml")[0]
    assert bench.cause_key(mlperf) == "aggregated, dense"


def test_the_block_shows_only_quantities_with_values_and_says_when_bands_never_saw_the_file():
    rb = sys.modules["readme_blocks"]
    figures = {"n": 4, "median_abs_rel_error": 0.5, "p90_abs_rel_error": 0.6, "signed_median": -0.5,
               "inside": 0, "share": 0.0}
    f = {"records": 4, "skipped": 0, "timed": 0, "sustained": 0, "in_band_pools": False,
         "quantities": {"throughput": {"n": 0}, "input_throughput": figures},
         "modes": {"offline": {"input_throughput": figures}}, "groups": {"sglang, hopper": {"input_throughput": figures}},
         "causes": {"disaggregated prefill, MoE": {"input_throughput": figures}}}
    text = rb.render_serving_holdout({"files": {"x": f}})
    assert "never seen these records" in text and "output tokens/s" not in text
    assert "input tokens/s, disaggregated prefill, MoE" in text and "input tokens/s, offline arrivals" in text


def test_every_held_out_serving_file_has_a_title_in_the_block():
    """The block names each held-out file with serving records by its title, not its file stem."""
    import readme_serving

    from meshplan.records import SETS

    serving = [p.stem for p in SETS["held-out"] if any(r.kind == "serving" for r in load_records(p))]
    assert "serving-engines-2025b" in serving
    assert [s for s in serving if s not in readme_serving.SERVING_HOLDOUT_NAMES] == []
