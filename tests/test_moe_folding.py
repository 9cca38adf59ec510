"""MoE parallel folding: expert layers on their own ep x etp grid over the ranks of a pipeline
stage (Megatron-Core's `--expert-tensor-parallel-size` with ep not bounded by dp; Liu et al.,
"MoE Parallel Folding", arXiv 2504.14960). Qwen3-235B-A22B recipes fold ep=32 onto stages of
tp=4 x dp=8 ranks; these tests hold the layout to what folding means in memory, time, search
and the Megatron launch flags."""

from __future__ import annotations

import pytest

from meshplan import Cluster, load_model
from meshplan.training.layout.resolve import PlanError
from meshplan.export import export_plan
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.search.plans import candidates
from meshplan.training.memory.states import stage_params

MODEL = load_model("qwen3-235b-a22b")
CLUSTER = Cluster.build("h100-sxm-80gb", 256)
BASE = dict(pp=8, seq_len=4096, global_batch_size=512, micro_batch_size=1)


def resolved(**fields):
    return resolve_plan(TrainingPlan(**(BASE | fields)), MODEL, CLUSTER)


def test_expert_parallelism_wider_than_data_parallelism_resolves() -> None:
    plan = resolved(tp=4, ep=32, etp=1)
    assert plan.dp == 8 and plan.ep == 32 > plan.dp
    assert plan.etp == 1


def test_experts_split_over_ep_times_etp_and_dense_over_tp() -> None:
    folded, unfolded, half = (stage_params(MODEL, resolved(**f), 1) for f in
                              (dict(tp=4, ep=32, etp=1), dict(tp=4, ep=8), dict(tp=4, ep=16, etp=1)))
    assert folded.expert == pytest.approx(unfolded.expert, rel=1e-12)  # 32 x 1 == 8 x 4 ways
    assert half.expert == pytest.approx(2 * folded.expert, rel=1e-12)
    assert folded.dense == pytest.approx(unfolded.dense, rel=1e-12)  # attention still on tp=4


def test_folding_removes_tensor_parallel_traffic_from_expert_layers() -> None:
    """The same expert sharding with experts on 1 TP rank instead of 4: the expert GEMMs are
    4x wider per rank and the expert layers' TP collectives disappear. With etp = tp every rank
    of a TP group must see all of the group's routed tokens: each rank dispatches its own
    sequence shard and the expert-TP group then all-gathers the routed copies (Megatron-Core's
    alltoall dispatcher), traffic folding removes; the all-to-all carries the same shard either
    way, over an EP group of 32 instead of 8."""
    folded = estimate_step(MODEL, CLUSTER, resolved(tp=4, ep=32, etp=1))
    unfolded = estimate_step(MODEL, CLUSTER, resolved(tp=4, ep=8))
    assert folded.step_time_s < unfolded.step_time_s
    assert folded.breakdown["tp_comm_exposed"] < 0.5 * unfolded.breakdown["tp_comm_exposed"]
    assert folded.breakdown["ep_comm"] == pytest.approx(unfolded.breakdown["ep_comm"], rel=0.5)


def test_grid_that_does_not_tile_the_stage_is_refused() -> None:
    with pytest.raises(PlanError, match=r"ep=32 x etp=2 = 64 must divide tp=4 x cp=1 x dp=8 = 32"):
        resolved(tp=4, ep=32, etp=2)


def test_search_space_holds_folded_layouts() -> None:
    plans = list(candidates(TrainingPlan(**BASE), MODEL, CLUSTER, {"pp": 8, "tp": 4}))
    folded = {(p.ep, p.etp) for p in plans if p.etp is not None}
    assert (32, 1) in folded and (16, 2) in folded
    assert all(etp < 4 for _, etp in folded)


def test_megatron_launch_carries_both_grids() -> None:
    text = export_plan("megatron", MODEL, CLUSTER, resolved(tp=4, ep=32, etp=1))
    for flag, value in (("--tensor-model-parallel-size", 4), ("--expert-model-parallel-size", 32),
                        ("--expert-tensor-parallel-size", 1), ("--pipeline-model-parallel-size", 8)):
        assert f"{flag} {value}" in text, flag
