"""Host floor of training layers (training/time/kernels.py): which profile a framework uses, what a
layer's passes cost on the host, and that small work waits on the host while large work never
sees the floor."""

from __future__ import annotations

import pytest

from meshplan import Cluster, load_model
from meshplan.costs.host import HOST_OP_S
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.time.context import cost_context
from meshplan.training.time.kernels import layer_host_s, profile_for
from meshplan.training.time.layer import layer_time


def test_profiles_by_framework_and_the_fallback_note():
    assert profile_for("megatron") == ("te-fused", None)
    assert profile_for("torchtitan") == ("pytorch-eager", None)
    assert profile_for("maxtext") == ("compiled", None)
    name, note = profile_for("other")
    assert name == "pytorch-eager" and "no kernel profile for 'other'" in note
    model, cluster = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(framework="other", micro_batch_size=1, global_batch_size=8), model, cluster)
    assert "kernel_profile" in plan.chosen  # never a silent fallback


def test_host_seconds_per_layer_pass():
    llama = load_model("llama-3.1-8b")
    layer = llama.layers[0]
    assert layer_host_s("pytorch-eager", llama, layer, 1, False, 1) == pytest.approx((77 * HOST_OP_S, 142 * HOST_OP_S))
    fused = layer_host_s("te-fused", llama, layer, 4, True, 1)
    assert fused == pytest.approx(((22 + 4) * HOST_OP_S, (44 + 4) * HOST_OP_S))  # + AG/RS of SP
    assert layer_host_s("compiled", llama, layer, 8, True, 1) == (0.0, 0.0)
    moe = load_model("mixtral-8x7b")  # no shared expert: the MoE block replaces the dense MLP
    f, _ = layer_host_s("te-fused", moe, moe.layers[0], 1, False, 8)
    assert f == pytest.approx((22 + 2 * (9 + 2 - 4)) * HOST_OP_S)


def layer(model_name, framework, seq_len, mbs=1, **extra):
    model, cluster = load_model(model_name), Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(framework=framework, micro_batch_size=mbs, seq_len=seq_len,
                                     global_batch_size=8 * mbs, dp_sharding="full", **extra), model, cluster)
    return layer_time(cost_context(model, plan, cluster), model.layers[0])


def test_small_work_waits_on_the_host_large_work_does_not():
    tiny = layer("llama-3.2-1b", "torchtitan", 256)
    assert tiny.forward_s == pytest.approx(77 * HOST_OP_S)  # 256 tokens: host-bound
    assert layer("llama-3.2-1b", "maxtext", 256).forward_s < 0.5 * tiny.forward_s
    big = layer("llama-3.1-8b", "torchtitan", 8192)
    assert big.forward_s > 10 * 77 * HOST_OP_S  # 8k tokens: the device time, floor far below
