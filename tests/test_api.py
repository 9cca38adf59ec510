"""The public wrappers (meshplan/api.py) translate arguments faithfully and reject bad ones with
a ConfigError; docs/api.md (run by tests/test_docs_examples.py) covers the happy paths."""

from __future__ import annotations

import pytest

import meshplan
from meshplan.training.choose import best_plan
from meshplan.training.search.plans import search


@pytest.fixture(scope="module")
def setup():
    return meshplan.load_model("llama-3.2-1b"), meshplan.Cluster.build("h100-sxm-80gb", 8)


def test_estimate_training_is_best_plan_and_accepts_a_name(setup):
    model, cluster = setup
    plan = meshplan.TrainingPlan(tp=2, seq_len=2048, global_batch_size=32)
    by_name = meshplan.estimate_training("llama-3.2-1b", cluster, plan)
    direct = best_plan(plan, model, cluster)
    assert by_name.step_time_s == direct.step_time_s
    assert by_name.plan.micro_batch_size == direct.plan.micro_batch_size


def test_search_training_plans_passes_pins_and_objective(setup):
    model, cluster = setup
    base = meshplan.TrainingPlan(seq_len=2048, global_batch_size=32)
    result = meshplan.search_training_plans(model, cluster, base, pin={"tp": 2}, top=4)
    direct = search(model, cluster, base, {"tp": 2}, top=4)
    assert [e.plan.tp for e in result.ranked] == [2] * len(result.ranked) and result.ranked
    assert result.scores == direct.scores
    with pytest.raises(meshplan.ConfigError, match="objective 'speed'"):
        meshplan.search_training_plans(model, cluster, base, objective="speed")


def test_search_serving_plans_needs_an_slo(setup):
    model, _ = setup
    unit = meshplan.synthesize(meshplan.WorkloadSpec(arrival="poisson", request_rate=1, num_requests=20,
                                                     dataset="random", input_len=128, output_len=16), seed=0)
    with pytest.raises(meshplan.ConfigError, match="SLO"):
        meshplan.search_serving_plans(model, "h100-sxm-80gb", unit, 5.0)
    with pytest.raises(meshplan.UnknownNameError):
        meshplan.search_serving_plans(model, ["h100"], unit, 5.0, ttft_ms=100)


def test_validate_records_accepts_a_path(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("schema: 1\nrecords: []\n")
    assert meshplan.validate_records(path) == ([], [])
    assert meshplan.validation_report([], [])["summary"]["n"] == 0
