"""Small models and host-bound runs (issue #31): how a trainer launches its kernels
(`implementation`: eager, compiled, fused), the fused loss and memory-bound kernels of compiled
and hand-fused trainers, and small GEMMs priced by their tile waves over the SMs."""

from __future__ import annotations

import math

import pytest

from meshplan import Cluster, get_gpu, load_model
from meshplan.calibration.training import Case, parameters
from meshplan.costs.constants import constants_for
from meshplan.costs.ops import TILE_M, TILE_N, gemm_time, small_gemm_waves, wave_efficiency
from meshplan.errors import ConfigError
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.memory.total import logits_bytes
from meshplan.training.time.context import cost_context
from meshplan.training.time.fusion import fused_elements_per_token
from meshplan.training.time.kernels import layer_host_s, profile_for
from meshplan.training.time.layer import _memory_bound
from meshplan.training.time.step import _embedding_and_head
from meshplan.validate.records import parse_record
from meshplan.validate.training_records import training_case

GPT2 = load_model("gpt2")


def plan(implementation=None, framework="other", cluster=None, **extra):
    cluster = cluster or Cluster.build("h100-sxm-80gb", 8)
    fields = dict(framework=framework, seq_len=1024, micro_batch_size=64, global_batch_size=512,
                  dp_sharding="optimizer", implementation=implementation) | extra
    return resolve_plan(TrainingPlan(**fields), GPT2, cluster), cluster


def test_implementation_picks_the_kernel_profile():
    assert profile_for("other", "fused") == ("native-fused", None)
    assert profile_for("torchtitan", "compiled") == ("inductor", None)
    assert profile_for("megatron", "eager") == ("te-fused", None)
    assert profile_for("maxtext", "eager") == ("compiled", None)  # XLA whatever the plan says
    assert plan()[0].implementation == "eager"
    assert plan(framework="maxtext", dp_sharding="full")[0].implementation == "compiled"
    resolved, _ = plan("fused")
    assert resolved.implementation == "fused" and "kernel_profile" not in resolved.chosen


def test_launched_kernels_cost_less_host_time_than_dispatched_ops():
    layer = GPT2.layers[0]
    eager = layer_host_s("pytorch-eager", GPT2, layer, 1, False, 1)
    compiled = layer_host_s("inductor", GPT2, layer, 1, False, 1)
    fused = layer_host_s("native-fused", GPT2, layer, 1, False, 1)
    assert compiled == pytest.approx((9 * 5e-6, 18 * 5e-6))  # kernels x one launch each
    assert fused == pytest.approx((7 * 4e-6, 14 * 4e-6))
    assert fused[0] < compiled[0] < eager[0] / 5
    tp = layer_host_s("inductor", GPT2, layer, 2, True, 1)  # + all-gather/reduce-scatter of SP
    assert tp[0] == pytest.approx((9 + 4) * 5e-6)


def test_fused_loss_streams_a_fraction_of_the_eager_fp32_loss():
    seconds = {}
    for impl in ("eager", "compiled", "fused"):
        resolved, cluster = plan(impl)
        ctx = cost_context(GPT2, resolved, cluster)
        seconds[impl] = sum(_embedding_and_head(ctx, 0))
    # the head GEMMs are shared; the loss passes go from 44 to 14 to 6 bytes per logit
    assert seconds["fused"] < seconds["compiled"] < seconds["eager"]
    resolved, cluster = plan("eager")
    ctx = cost_context(GPT2, resolved, cluster)
    logits = ctx.tokens * GPT2.vocab_size
    saved = ctx.memory(logits * 38) - ctx.memory(0)  # 44 - 6 bytes per logit
    assert seconds["eager"] - seconds["fused"] == pytest.approx(saved, rel=0.02)


def test_fused_trainers_stream_fewer_bytes_in_memory_bound_kernels():
    layer = GPT2.layers[0]
    h = GPT2.hidden_size
    assert fused_elements_per_token("fused", GPT2, layer, 1, 1) == 8 * h + 4 * h  # no rotary in GPT-2
    assert fused_elements_per_token("compiled", GPT2, layer, 1, 1) == 8 * h + 8 * h
    times = {}
    for impl in ("eager", "compiled", "fused"):
        resolved, cluster = plan(impl)
        times[impl] = _memory_bound(cost_context(GPT2, resolved, cluster), layer)
    assert times["fused"] < times["compiled"] < 0.7 * times["eager"]


def test_fused_loss_holds_fewer_logit_bytes():
    eager, _ = plan("eager")
    fused, _ = plan("fused")
    held_eager, transient_eager = logits_bytes(GPT2, eager, 0)
    held_fused, transient_fused = logits_bytes(GPT2, fused, 0)
    assert held_fused < held_eager / 2 and transient_fused == 0 < transient_eager


def test_a_fused_trainer_is_faster_than_eager_on_the_same_plan():
    speed = {impl: estimate_step(GPT2, plan(impl)[1], plan(impl)[0]).tokens_per_s_per_gpu
             for impl in ("eager", "compiled", "fused")}
    assert speed["eager"] < speed["compiled"] < speed["fused"]


def test_small_gemm_is_one_wave_with_split_k():
    sms = 132
    assert small_gemm_waves(4096, 4096, 4096, sms) == wave_efficiency(4096, 4096, sms)  # many tiles
    tiles = math.ceil(2048 / TILE_M) * math.ceil(384 / TILE_N)  # 32 tiles: TP8 slice of a 1k model
    assert small_gemm_waves(2048, 384, 256, sms) == pytest.approx(tiles / sms)  # K too short to split
    assert small_gemm_waves(2048, 384, 4096, sms) == pytest.approx(4 * tiles / sms)  # 4 K-slices fit
    assert small_gemm_waves(TILE_M, TILE_N, 8192, sms) == pytest.approx(16 / sms)  # 16 slices of 512


def test_small_gemm_has_a_latency_floor():
    """Fewer tiles than SMs: half the rows take the same time (one wave of one tile's main loop)."""
    gpu = get_gpu("h100-sxm-80gb")
    c = constants_for(gpu)

    def t(m, waves):
        return gemm_time(m, 384, 512, gpu=gpu, dtype="bf16", c=c, tile_waves=waves)

    assert t(2048, True) == pytest.approx(t(1024, True), rel=0.05)
    assert t(2048, False) > 1.8 * t(1024, False) - c.launch_s  # the split-K assumption scales with m
    assert t(2048, True) - c.launch_s > 2 * (t(2048, False) - c.launch_s)  # 32 of 132 SMs busy


def test_records_state_the_implementation_and_reject_unknown_ones():
    raw = {"id": "x", "kind": "training", "source": {"name": "test"}, "model": "gpt2",
           "hardware": {"gpu": "a100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
           "training": {"framework": "other", "implementation": "fused", "seq_length": 1024,
                        "global_batch_size": 512, "micro_batch_size": 64},
           "measured": {"tokens_per_s_per_gpu": 2e5}}
    case = training_case(parse_record(raw, "test"))
    assert case.plan.implementation == "fused"
    raw["training"]["implementation"] = "jit"
    with pytest.raises(ConfigError, match="implementation"):
        parse_record(raw, "test")


def test_the_fit_gives_no_scale_to_an_unnamed_framework():
    resolved, cluster = plan("compiled")
    cases = [Case(None, GPT2, cluster, resolved, 1.0)]
    names = {p.path for p in parameters(cases)}
    assert ("framework", "other", "compute_scale") not in names
    assert ("architecture", "hopper", "compute_scale") in names


def test_an_implementation_no_record_measured_is_out_of_regime():
    from meshplan.bands.regime import distance, out_of_regime, regime_of

    compiled, cluster = plan("compiled")
    fused, _ = plan("fused")
    seen = [regime_of(GPT2, cluster, compiled)]
    question = regime_of(GPT2, cluster, fused)
    assert out_of_regime(question, seen) == ["no calibration record with implementation fused"]
    assert distance(question, seen[0]) == 1.0
