"""Serving engine constants: one row per engine generation, every value sourced, the engine
release in a plan or a run record selecting its generation's row."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from meshplan import ServingPlan
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.serving.cost.constants import (FIELDS, constants_key, engine_constants, resolve,
                                             upper_bound)
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.validate.records import parse_record
from meshplan.validate.serving_records import serving_case


def _rows(name: str) -> dict:
    text = resources.files("meshplan.serving").joinpath("data", name).read_text()
    return yaml.safe_load(text)


@pytest.mark.parametrize("engine,version,key", [
    ("tensorrt-llm", "0.13.0", "tensorrt-llm"),
    ("tensorrt-llm", "0.5.0 (TensorRT 9.1)", "tensorrt-llm"),
    ("tensorrt-llm", "v0.21.0", "tensorrt-llm"),
    ("tensorrt-llm", "1.0", "tensorrt-llm-pytorch"),
    ("tensorrt-llm", "1.2.0rc1", "tensorrt-llm-pytorch"),
    ("tensorrt-llm", "PyTorch workflow at commit b626", "tensorrt-llm-pytorch"),
    ("tensorrt-llm", None, "tensorrt-llm-pytorch"),
    ("vllm", "0.6.0", "vllm"),
    ("sglang", None, "sglang"),
])
def test_constants_key_by_generation(engine, version, key):
    assert constants_key(engine, version) == key


def test_every_row_is_complete_and_sourced():
    rows = _rows("serving_constants.yaml")["engines"]
    assert {"vllm", "sglang", "tensorrt-llm", "tensorrt-llm-pytorch"} <= set(rows)
    for engine, row in rows.items():
        own = [name for name in FIELDS if name in row]
        assert own == list(FIELDS) or row.get("inherits") in rows, engine
        for name in own:
            assert row[name]["source"], (engine, name)
            bound = row[name].get("max")
            assert bound is None or row[name]["value"] <= bound


def test_an_unfitted_generation_row_is_priced_as_its_parent():
    # The PyTorch backend runs the TensorRT-engine runtime's kernels: unfitted, it takes that
    # row's constants, fitted values included; its own fit overrides them.
    parent = {"kv_read_efficiency": 0.61, "grouped_gemm_efficiency": 0.42, "iteration_s": 1e-3}
    k = resolve("tensorrt-llm-pytorch", {"tensorrt-llm": parent})
    assert k == resolve("tensorrt-llm", {"tensorrt-llm": parent})
    assert k.kv_read_efficiency == 0.61 and k.iteration_s == 1e-3
    fitted = resolve("tensorrt-llm-pytorch", {"tensorrt-llm": parent,
                                              "tensorrt-llm-pytorch": {"kv_read_efficiency": 0.7}})
    assert fitted.kv_read_efficiency == 0.7 and fitted.grouped_gemm_efficiency == 0.42
    assert upper_bound("tensorrt-llm-pytorch", "kv_read_efficiency") == upper_bound("tensorrt-llm", "kv_read_efficiency")


def test_held_out_errors_ignore_the_shipped_fit(monkeypatch):
    # Leave-one-source-out prices a held-out engine from the fold's fit and the defaults file,
    # never from fitted_serving.yaml (fitted on the held-out source too).
    import meshplan.calibration.serving as cs

    class Case:
        engine, measured = "tensorrt-llm-pytorch", {"output_tokens_per_s": 1.0}
    used = []
    monkeypatch.setattr(cs, "predict", lambda fc, k: used.append(k) or {"output_tokens_per_s": 1.0})
    cs.errors([Case()], {}, packaged=False)
    assert used[0] == resolve("tensorrt-llm-pytorch", {})


def test_fitted_rows_are_known_engines():
    known = set(_rows("serving_constants.yaml")["engines"])
    assert set(_rows("fitted_serving.yaml").get("engines", {})) <= known


def test_engine_version_selects_the_constants_a_replica_is_priced_with():
    model = load_model("llama-3.1-8b")
    cluster = Cluster.build(gpu="h100-sxm-80gb", num_gpus=1)
    workload = synthesize(WorkloadSpec(num_requests=4, input_len=128, output_len=8))
    priced = {}
    for version in ("0.13.0", "1.0"):
        plan = ServingPlan(engine="tensorrt-llm", engine_version=version)
        pool = resolve_pools(model, cluster, plan, workload)[0]
        replica = build_replicas(model, cluster, pool, workload, IterationLog(), 0)[0]
        priced[version] = replica.cost.k
    assert priced["0.13.0"] == engine_constants("tensorrt-llm")
    assert priced["1.0"] == engine_constants("tensorrt-llm-pytorch")


def test_run_record_engine_version_reaches_the_plan():
    raw = {
        "id": "trt-version", "kind": "serving", "source": {"name": "test"},
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 1, "gpus_per_node": 8},
        "serving": {"engine": "tensorrt-llm", "engine_version": "0.13.0", "tp": 1,
                    "workload": {"mode": "offline", "num_requests": 8, "input_len": 128,
                                 "output_len": 128}},
        "measured": {"output_tokens_per_s": 1000.0}}
    record = parse_record(raw, "test.yaml")
    case = serving_case(record)
    assert case.plan.engine_version == "0.13.0"
    assert constants_key(case.plan.engine, case.plan.engine_version) == "tensorrt-llm"
