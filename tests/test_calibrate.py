"""Training calibration: the fitted parameters, their table round trip, and that the fit
recovers constants from runs the model itself generated."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from meshplan import Cluster, load_model
from meshplan.calibration import training as cal
from meshplan.training import TrainingPlan, resolve_plan

L8 = load_model("llama-3.1-8b")


def _case(framework, gpu="h100-sxm-80gb", gpus=8, source="a", seq_len=4096, **fields):
    cluster = Cluster.build(gpu, gpus)
    plan = resolve_plan(TrainingPlan(framework=framework, seq_len=seq_len, global_batch_size=gpus,
                                     micro_batch_size=1, **fields), L8, cluster)
    record = SimpleNamespace(id=f"{framework}-{gpu}-{gpus}", source={"name": source})
    return cal.Case(record, L8, cluster, plan, 1.0)


def _measured(cases, table):
    return [cal.Case(c.record, c.model, c.cluster, c.plan, cal.predict(c, table)) for c in cases]


def test_parameters_follow_what_the_cases_can_inform():
    cases = [_case("megatron"), _case("torchtitan", dp_sharding="full"),
             _case("megatron", gpu="a100-sxm-80gb")]
    paths = [p.path for p in cal.parameters(cases)]
    assert ("architecture", "hopper", "compute_scale") in paths
    assert ("architecture", "ampere", "compute_scale") in paths
    assert ("framework", "torchtitan", "fsdp_comm_scale") in paths
    assert ("framework", "megatron", "fsdp_comm_scale") not in paths  # no sharded megatron run
    assert {("global", name) for name, *_ in cal.GLOBALS} <= set(paths)


def test_table_and_parameter_vector_round_trip():
    cases = [_case("megatron"), _case("torchtitan", dp_sharding="full")]
    params = cal.parameters(cases)
    table = {"architecture": {"hopper": {"compute_scale": 1.1}},
             "framework": {"torchtitan": {"compute_scale": 0.9, "fsdp_comm_scale": 3.0}},
             "global": {"moe_overhead_s": 1e-3}}
    back = cal._table(cal._theta(table, params), params)
    assert back["framework"]["torchtitan"]["fsdp_comm_scale"] == pytest.approx(3.0)
    assert back["architecture"]["hopper"]["compute_scale"] == pytest.approx(1.1)
    assert back["global"]["moe_overhead_s"] == pytest.approx(1e-3)
    assert back["framework"]["megatron"]["compute_scale"] == pytest.approx(1.0)  # its start


def test_fit_recovers_the_scales_that_generated_the_runs():
    truth = {"architecture": {"hopper": {"compute_scale": 1.15}, "ampere": {"compute_scale": 1.2}},
             "framework": {"megatron": {"compute_scale": 0.95}, "nemo": {"compute_scale": 1.0}}}
    # Sequence lengths from 1k to 32k vary attention's share of the step, which separates the
    # attention scale from the compute scales.
    shapes = [dict(gpus=8, seq_len=1024), dict(gpus=16, tp=2), dict(gpus=8, recompute="full", seq_len=32768)]
    cases = [_case(fw, gpu=gpu, **shape) for fw in ("megatron", "nemo")
             for gpu in ("h100-sxm-80gb", "a100-sxm-80gb") for shape in shapes]
    fitted = cal.fit(_measured(cases, truth), max_nfev=60)
    errors = cal.errors(_measured(cases, truth), fitted)
    assert max(abs(e) for e in errors) < 0.02
    # Only products of architecture and framework scales are identified (and the attention
    # scale shares some of their work; the prior pulls every scale toward 1): check one product.
    product = (fitted["architecture"]["hopper"]["compute_scale"]
               * fitted["framework"]["megatron"]["compute_scale"])
    assert product == pytest.approx(1.15 * 0.95, rel=0.05)


def test_leave_one_source_out_predicts_each_source_from_the_others():
    cases = [_case("megatron", source="a"), _case("megatron", gpus=16, tp=2, source="b"),
             _case("megatron", gpus=8, recompute="full", source="c")]
    truth = {"framework": {"megatron": {"compute_scale": 1.1}}}
    measured = _measured(cases, truth)
    folds = cal.leave_one_source_out(measured, cal.fit(measured, max_nfev=30))
    assert set(folds) == {"a", "b", "c"}
    assert all(abs(e) < 0.05 for v in folds.values() for e in v)


def test_an_unnamed_framework_runs_at_the_average_calibrated_frameworks_efficiency():
    # Only architecture x framework is measured. The fit puts the common factor in the
    # architecture scale, so the named frameworks' scales average to 1 and a trainer no record
    # names (framework "other", or a framework left out) is priced like the average framework,
    # here sqrt(1.3 x 1.1) on Hopper. With the prior alone the split is arbitrary (about a third of
    # the common factor in the architecture: 6% off).
    truth = {"framework": {"megatron": {"compute_scale": 1.3}, "nemo": {"compute_scale": 1.1}}}
    shapes = [dict(gpus=8, seq_len=1024), dict(gpus=16, tp=2), dict(gpus=8, recompute="full", seq_len=32768)]
    cases = [_case(fw, **shape) for fw in ("megatron", "nemo") for shape in shapes]
    fitted = cal.fit(_measured(cases, truth), max_nfev=60)
    scales = [fitted["framework"][f]["compute_scale"] for f in ("megatron", "nemo")]
    assert scales[0] * scales[1] == pytest.approx(1.0, abs=0.02)
    other = _case("other")
    average = {"architecture": {"hopper": {"compute_scale": (1.3 * 1.1) ** 0.5}}}
    assert cal.predict(other, fitted) == pytest.approx(cal.predict(other, average), rel=0.025)
