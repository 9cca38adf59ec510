"""Plan resolution: defaults are chosen and reported; impossible plans name every factor."""

from __future__ import annotations

import pytest

from meshplan import Cluster, load_model
from meshplan.training import PlanError, TrainingPlan, resolve_plan

L70 = load_model("llama-3.1-70b")
L405 = load_model("llama-3.1-405b")
MIXTRAL = load_model("mixtral-8x7b")
H100_64 = Cluster.build("h100-sxm-80gb", 64)


def resolve(model=L70, cluster=H100_64, **fields):
    return resolve_plan(TrainingPlan(**fields), model, cluster)


def test_dp_is_derived_and_defaults_are_reported():
    plan = resolve(tp=8, pp=2)
    assert plan.dp == 4
    assert plan.sequence_parallel is True
    assert "micro_batch_size" in plan.chosen and "dp_sharding" in plan.chosen
    assert plan.num_microbatches == plan.global_batch_size // (plan.micro_batch_size * plan.dp)


def test_world_size_mismatch_names_every_factor():
    with pytest.raises(PlanError, match=r"tp=8 x cp=1 x pp=2 x dp=8 = 128 but num_gpus=64; "
                                        r"with tp=8 x cp=1 x pp=2 use dp=4"):
        resolve(tp=8, pp=2, dp=8)


def test_tp_must_divide_kv_heads():
    with pytest.raises(PlanError, match=r"tp=16 does not divide num_key_value_heads=8 .*valid tp: 8"):
        resolve(cluster=Cluster.build("h100-sxm-80gb", 64), tp=16)


def test_pp_not_dividing_layers_takes_the_remainder_on_the_edge_chunks():
    plan = resolve(model=L405, cluster=Cluster.build("h100-sxm-80gb", 512), tp=8, pp=8)
    assert [len(plan.stage_layers(s)) for s in range(8)] == [15, 16, 16, 16, 16, 16, 16, 15]
    assert plan.chosen["pipeline_split"].startswith("15,16x6,15 (8 chunks do not divide")
    with pytest.raises(PlanError, match=r"128 pipeline chunks are more than the 126 layers"):
        resolve(model=L405, cluster=Cluster.build("h100-sxm-80gb", 512), tp=8, pp=8, vpp=16)


def test_explicit_pipeline_split_is_checked_and_used():
    split = (15, 16, 16, 16, 16, 16, 16, 15)
    plan = resolve(model=L405, cluster=Cluster.build("h100-sxm-80gb", 512), tp=8, pp=8,
                   pipeline_split=split)
    assert [len(plan.stage_layers(s)) for s in range(8)] == list(split)
    with pytest.raises(PlanError, match="must have pp x vpp = 8 positive entries summing to the 126"):
        resolve(model=L405, cluster=Cluster.build("h100-sxm-80gb", 512), tp=8, pp=8,
                pipeline_split=(16,) * 8)


def test_micro_batch_must_divide_global_batch_per_dp_rank():
    with pytest.raises(PlanError, match=r"global_batch_size=100 is not a multiple of "
                                        r"micro_batch_size=2 x dp=8 = 16; use 96 or 112"):
        resolve(tp=8, micro_batch_size=2, global_batch_size=100)


def test_interleaved_needs_vpp_and_microbatches_multiple_of_pp():
    with pytest.raises(PlanError, match="interleaved schedule needs pp > 1 and vpp > 1"):
        resolve(tp=8, pp=2, schedule="interleaved")
    with pytest.raises(PlanError, match=r"micro-batches per step to be a multiple of pp=4"):
        resolve(tp=8, pp=4, vpp=2, micro_batch_size=1, global_batch_size=6)
    assert resolve(tp=8, pp=4, vpp=2, global_batch_size=16).schedule == "interleaved"


def test_expert_parallel_needs_moe_and_dividing_experts():
    with pytest.raises(PlanError, match="need a mixture-of-experts model"):
        resolve(tp=8, ep=2)
    with pytest.raises(PlanError, match=r"ep=3 does not divide the 8 routed experts"):
        resolve(model=MIXTRAL, cluster=Cluster.build("h100-sxm-80gb", 24), tp=1, ep=3)
    plan = resolve(model=MIXTRAL, tp=2, ep=8)
    assert plan.etp == 2 and plan.expert_dp == 2 * 32 // (8 * 2)


def test_context_parallel_sequence_must_split_evenly():
    with pytest.raises(PlanError, match=r"seq_len=4100 must be a multiple of 2 x cp = 8"):
        resolve(tp=8, cp=4, seq_len=4100)


def test_long_sequences_warn_but_do_not_fail():
    plan = resolve(tp=8, seq_len=262144, cp=8)
    assert any("exceeds" in w for w in plan.warnings)


def test_rank_order_must_be_a_permutation():
    with pytest.raises(PlanError, match="rank_order 'tp-dp-pp' must name each of tp, cp, ep, dp, pp"):
        resolve(tp=8, rank_order="tp-dp-pp")
