"""Step-time model: physical sanity of op costs, overlaps, pipelines, and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, get_gpu, load_model
from meshplan.cli.app import app
from meshplan.costs.comm import collective_time
from meshplan.costs.constants import constants_for, gpu_ceiling, upper_bound
from meshplan.costs.ops import POWER_CLOCK_EXPONENT, clock_factor, gemm_time
from meshplan.errors import ConfigError
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.time.constants import TrainingConstants, apply_fit
from meshplan.training.time.context import cost_context
from meshplan.training.estimate import estimate_step
from meshplan.training.time.layer import _tp_comm, layer_time
from meshplan.training.layout.resolve import MICROBATCHES_PER_STAGE
from meshplan.training.memory.states import layer_split
from meshplan.training.time.step import _fsdp_traffic

L8 = load_model("llama-3.1-8b")
L70 = load_model("llama-3.1-70b")
runner = CliRunner()


def step(model=L70, gpus=64, gpu="h100-sxm-80gb", power=None, **fields):
    cluster = Cluster.build(gpu, gpus, gpu_power_limit_w=power)
    return estimate_step(model, cluster, resolve_plan(TrainingPlan(**fields), model, cluster))


def test_large_gemm_stays_below_the_measured_matmul_ceiling():
    # mamf-bf16-nvidia-h100-sxm: best brute-forced shape reaches 80.3% of the dense peak
    gpu = get_gpu("h100-sxm-80gb")
    t = gemm_time(16384, 16384, 16384, gpu=gpu, dtype="bf16", c=constants_for(gpu))
    achieved = 2 * 16384**3 / t / gpu.peak_flops("bf16")
    assert achieved <= upper_bound("hopper", "gemm_efficiency")


def test_skinny_gemm_is_memory_bound():
    gpu = get_gpu("h100-sxm-80gb")
    c = constants_for(gpu)
    t = gemm_time(1, 8192, 8192, gpu=gpu, dtype="bf16", c=c)
    weights_read = 2 * 8192 * 8192 / gpu.hbm_bandwidth_bytes_per_s
    assert weights_read < t < 3 * weights_read


def test_power_cap_lowers_clock_and_throughput():
    assert clock_factor(get_gpu("h100-sxm-96gb"), 500) == pytest.approx((500 / 700) ** POWER_CLOCK_EXPONENT)
    full = step(gpu="h100-sxm-96gb", tp=8, seq_len=4096, global_batch_size=64, micro_batch_size=1)
    capped = step(gpu="h100-sxm-96gb", power=500, tp=8, seq_len=4096, global_batch_size=64,
                  micro_batch_size=1)
    assert capped.tokens_per_s_per_gpu < full.tokens_per_s_per_gpu


def test_more_microbatches_shrink_the_pipeline_bubble():
    few = step(tp=8, pp=4, global_batch_size=8, micro_batch_size=1)
    many = step(tp=8, pp=4, global_batch_size=128, micro_batch_size=1)
    assert many.pipeline.bubble_fraction < few.pipeline.bubble_fraction
    assert few.pipeline.bubble_fraction == pytest.approx(3 / (4 + 3), rel=0.15)


def test_tp_overlap_hides_communication():
    plain = step(tp=8, tp_comm_overlap=False, global_batch_size=64, micro_batch_size=1)
    overlapped = step(tp=8, tp_comm_overlap=True, global_batch_size=64, micro_batch_size=1)
    assert overlapped.breakdown["tp_comm_exposed"] < plain.breakdown["tp_comm_exposed"]
    assert overlapped.step_time_s < plain.step_time_s


def test_full_recompute_costs_about_a_third_more():
    base = step(model=L8, gpus=8, framework="megatron", micro_batch_size=1, global_batch_size=32)
    full = step(model=L8, gpus=8, framework="megatron", micro_batch_size=1, global_batch_size=32,
                recompute="full")
    assert 1.15 < full.step_time_s / base.step_time_s < 1.45
    assert full.hfu > full.mfu


def test_mfu_uses_model_flops():
    est = step(model=L8, gpus=8, micro_batch_size=1, global_batch_size=32, seq_len=4096)
    tokens = 32 * 4096
    flops = 3 * L8.flops_per_token_forward(4096) * tokens
    assert est.mfu == pytest.approx(flops / (est.step_time_s * 8 * 989.4e12))
    assert 0.2 < est.mfu < 0.8


def test_cli_estimate_json_and_trace(tmp_path):
    trace = tmp_path / "step.json"
    result = runner.invoke(app, ["train", "estimate", "--model", "llama-3.1-70b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "64", "--tp", "8", "--pp", "4",
                                 "--global-batch-size", "64", "--json", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "breakdown", "peak_bytes", "fits"):
        assert key in data
    assert "micro_batch_size" in data["chosen"]
    events = json.loads(trace.read_text())["traceEvents"]
    stages = {e["pid"] for e in events if e.get("ph") == "X"}
    assert len(stages) == 4
    threads = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"compute", "pp p2p", "tp comm"} <= threads


def test_cli_estimate_table():
    result = runner.invoke(app, ["train", "estimate", "--model", "llama-3.1-8b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "8", "--recompute", "full"])
    assert result.exit_code == 0, result.output
    assert "tokens / s / GPU" in result.stdout and "MFU" in result.stdout


def _layer(attention, seq_len, framework="hf"):
    from meshplan.training.time.context import cost_context
    from meshplan.training.time.layer import layer_time
    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(framework=framework, attention=attention, seq_len=seq_len,
                                     global_batch_size=8, micro_batch_size=1), L8, cluster)
    return layer_time(cost_context(L8, plan, cluster), L8.layers[0])


def test_eager_attention_pays_for_the_score_square():
    # Unfused attention writes and reads b x heads x s^2 scores through HBM and computes the
    # whole square; fused kernels skip the masked half and keep scores on chip.
    fused, eager = _layer("sdpa", 8192), _layer("eager", 8192)
    assert eager.forward_s > 1.2 * fused.forward_s
    assert eager.backward_s > fused.backward_s
    # The extra cost is quadratic in the sequence: 4x the tokens -> ~16x the score traffic.
    extra_short = _layer("eager", 2048).forward_s - _layer("sdpa", 2048).forward_s
    extra_long = eager.forward_s - fused.forward_s
    assert 8 < extra_long / extra_short < 20


def test_fsdp_gathers_are_exposed_only_when_they_outlast_compute():
    def fsdp(gbps, mbs):
        cluster = Cluster.build("h100-sxm-80gb", 64, inter_node_gbps_per_gpu=gbps)
        plan = resolve_plan(TrainingPlan(framework="torchtitan", dp_sharding="full", seq_len=4096,
                                         global_batch_size=64 * mbs, micro_batch_size=mbs),
                            L70, cluster)
        return estimate_step(L70, cluster, plan, with_memory=False).breakdown["fsdp_gather_exposed"]
    fast_net, slow_net = fsdp(400, 1), fsdp(10, 1)
    assert slow_net > 5 * fast_net
    # Twice the tokens per micro-batch hide more of the same per-micro-batch traffic.
    assert fsdp(10, 2) < 2 * slow_net


def test_volta_runs_unfused_attention_and_refuses_flash():
    # FlashAttention needs compute capability 8.0; Megatron on V100 ran its unfused softmax.
    model = load_model("llama-3.2-1b")
    cluster = Cluster.build("v100-sxm2-32gb", 8)
    plan = resolve_plan(TrainingPlan(framework="megatron", seq_len=2048, global_batch_size=8,
                                     micro_batch_size=1), model, cluster)
    assert plan.attention == "eager" and "attention" in plan.chosen
    assert resolve_plan(TrainingPlan(framework="torchtitan", seq_len=2048, global_batch_size=8,
                                     micro_batch_size=1), model, cluster).attention == "sdpa"
    with pytest.raises(ConfigError, match="FlashAttention needs an Ampere"):
        resolve_plan(TrainingPlan(attention="flash", seq_len=2048, global_batch_size=8,
                                  micro_batch_size=1), model, cluster)


def test_open_global_batch_fills_the_pipeline():
    cluster = Cluster.build("h100-sxm-80gb", 64)
    piped = resolve_plan(TrainingPlan(tp=8, pp=4, micro_batch_size=1), L70, cluster)
    assert piped.num_microbatches == MICROBATCHES_PER_STAGE * 4
    assert piped.global_batch_size == MICROBATCHES_PER_STAGE * 4 * 2
    # The batch does not grow with the micro-batch size: bigger micro-batches, fewer of them.
    wide = resolve_plan(TrainingPlan(tp=8, pp=4, micro_batch_size=4), L70, cluster)
    assert wide.global_batch_size == piped.global_batch_size and wide.num_microbatches == 8
    flat = resolve_plan(TrainingPlan(tp=8, micro_batch_size=2), L70, cluster)
    assert flat.num_microbatches == 1 and flat.global_batch_size == 2 * 8


def _sharded(gpus, framework="torchtitan", constants=None):
    cluster = Cluster.build("h100-sxm-80gb", gpus)
    plan = resolve_plan(TrainingPlan(framework=framework, dp_sharding="full", seq_len=4096,
                                     global_batch_size=gpus, micro_batch_size=1), L8, cluster)
    return cost_context(L8, plan, cluster, constants)


def test_sharded_traffic_pays_ring_latency_per_unit():
    # One gather per transformer block: at fixed bytes, latency grows with the ring's length.
    layers = list(range(L8.num_layers))
    small, large = _fsdp_traffic(_sharded(16), layers), _fsdp_traffic(_sharded(2048), layers)
    assert large[0] > small[0]
    ctx = _sharded(2048)
    one_unit = collective_time("all_gather", sum(sum(layer_split(L8, i, ctx.plan)) for i in layers)
                               * ctx.act_width, ctx.groups.shard, ctx.cluster, ctx.comm)
    assert large[0] > one_unit
    # DeepSpeed ZeRO-3 fetches four submodules per layer: more collectives, more latency.
    assert _fsdp_traffic(_sharded(2048, "deepspeed"), layers)[0] > large[0]


def test_framework_sharded_traffic_scale_multiplies_the_traffic():
    layers = list(range(L8.num_layers))
    base = _fsdp_traffic(_sharded(64, constants=TrainingConstants()), layers)
    slow = _fsdp_traffic(_sharded(64, constants=replace(TrainingConstants(), fsdp_comm_scale=8.0)), layers)
    assert slow == pytest.approx((8 * base[0], 8 * base[1]))
    k = apply_fit({"framework": {"deepspeed": {"compute_scale": 1.2, "fsdp_comm_scale": 8.0}}},
                  "deepspeed", "ampere")
    assert (k.compute_scale, k.fsdp_comm_scale) == (1.2, 8.0)
    assert apply_fit({}, "deepspeed", "ampere").fsdp_comm_scale == 1.0


def test_moe_overhead_lands_on_moe_layers_only():
    model = load_model("qwen3-30b-a3b")
    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(framework="megatron", ep=8, seq_len=4096, global_batch_size=8,
                                     micro_batch_size=1), model, cluster)
    base = TrainingConstants()
    slow = replace(base, moe_overhead_s=1e-3)
    moe = model.layers[0]
    assert (layer_time(cost_context(model, plan, cluster, slow), moe).forward_s
            - layer_time(cost_context(model, plan, cluster, base), moe).forward_s) == pytest.approx(1e-3)
    dense_plan = resolve_plan(TrainingPlan(seq_len=4096, global_batch_size=8, micro_batch_size=1),
                              L8, cluster)
    assert (layer_time(cost_context(L8, dense_plan, cluster, slow), L8.layers[0])
            == layer_time(cost_context(L8, dense_plan, cluster, base), L8.layers[0]))


def test_hidden_communication_still_costs_the_overlap_penalty():
    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(tp=8, tp_comm_overlap=True, seq_len=4096, global_batch_size=8,
                                     micro_batch_size=1), L8, cluster)
    free = replace(TrainingConstants(), tp_overlap_exposed=0.0, overlap_penalty=0.0)
    taxed = replace(free, overlap_penalty=0.1)
    ctx = cost_context(L8, plan, cluster, taxed)
    extra = (layer_time(ctx, L8.layers[0]).forward_s
             - layer_time(cost_context(L8, plan, cluster, free), L8.layers[0]).forward_s)
    assert extra == pytest.approx(0.1 * _tp_comm(ctx, L8.layers[0]))


def test_nvfp4_runs_fp4_gemms_with_heavier_casts():
    cluster = Cluster.build("b200-180gb", 8)
    runs = {p: step(model=L8, gpus=8, gpu="b200-180gb", precision=p, seq_len=8192,
                    global_batch_size=8, micro_batch_size=1) for p in ("bf16", "fp8", "fp4")}
    speed = {p: r.tokens_per_s_per_gpu for p, r in runs.items()}
    assert speed["bf16"] < speed["fp8"] < speed["fp4"] < 2 * speed["fp8"]
    # MFU counts against the dense bf16 peak whatever the GEMM precision.
    assert runs["fp4"].mfu / runs["bf16"].mfu == pytest.approx(speed["fp4"] / speed["bf16"])
    plan = resolve_plan(TrainingPlan(precision="fp4", seq_len=8192, global_batch_size=8,
                                     micro_batch_size=1), L8, cluster)
    heavy = replace(TrainingConstants(), fp4_cast_scale=4.0)
    ctx, ctx_heavy = cost_context(L8, plan, cluster), cost_context(L8, plan, cluster, heavy)
    assert ctx_heavy.gemm(8192, 4096, 4096) > ctx.gemm(8192, 4096, 4096)


def test_nvfp4_needs_fp4_tensor_cores():
    with pytest.raises(ConfigError, match="fp4 tensor cores"):
        resolve_plan(TrainingPlan(precision="fp4", seq_len=4096, global_batch_size=8,
                                  micro_batch_size=1), L8, Cluster.build("h100-sxm-80gb", 8))


def test_gpu_models_run_gemms_at_their_own_measured_ceiling():
    # mamf-*-gb200 / b200: GB200 reaches 72.9% of its listed bf16 peak, B200 77.6% of its own.
    b200, gb200 = constants_for(get_gpu("b200-180gb")), constants_for(get_gpu("gb200-186gb"))
    assert gb200.gemm_efficiency / b200.gemm_efficiency == pytest.approx(0.729 / 0.776)
    assert gb200.fp8_gemm_efficiency / b200.fp8_gemm_efficiency == pytest.approx(0.723 / 0.763)
    assert constants_for(get_gpu("gb300-288gb")) == constants_for(get_gpu("b200-180gb"))  # no record
    for name in ("a100-sxm-80gb", "h100-sxm-80gb", "gh200-96gb", "b200-180gb", "gb200-186gb",
                 "b300-288gb", "mi300x-192gb"):
        gpu = get_gpu(name)
        assert constants_for(gpu).gemm_efficiency <= gpu_ceiling(gpu, "gemm_efficiency")


def test_every_gpu_ceiling_row_names_a_catalog_gpu_and_a_microbenchmark():
    from meshplan.costs.constants import _data
    from meshplan.hardware import list_gpus

    names = {g.name for g in list_gpus()}
    for gpu, row in _data()["gpus"].items():
        assert gpu in names
        for value in row.values():
            assert 0 < value["value"] < 1 and value["source"].startswith("mamf-")


def test_moe_layers_stream_their_routed_copies():
    # Permute, sort and combine move every routed copy through HBM: top-8 routing pays for
    # twice the copies of top-4 at the same expert width and count.
    from meshplan.training.time.layer import _memory_bound
    from meshplan.training.time.moe import MOE_PERMUTE_PASSES

    model = load_model("qwen3-30b-a3b")
    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(ep=8, seq_len=4096, global_batch_size=8, micro_batch_size=1),
                        model, cluster)
    ctx = cost_context(model, plan, cluster, TrainingConstants())
    moe = model.layers[0]
    top4 = replace(moe, mlp=replace(moe.mlp, top_k=4))
    extra = _memory_bound(ctx, moe) - _memory_bound(ctx, top4)
    inter = moe.mlp.expert.intermediate_size * 4  # the activation traffic of 4 more copies
    per_token = 2 * MOE_PERMUTE_PASSES * model.hidden_size * 4 * ctx.k.moe_imbalance + 6 * inter
    expected = per_token * ctx.tokens / (cluster.gpu.hbm_bandwidth_bytes_per_s * ctx.c.hbm_efficiency)
    assert extra == pytest.approx(expected, rel=1e-6)


def test_loss_streams_fp32_logits_forward_and_backward():
    # The last stage pays the head GEMM and an unfused fp32 cross-entropy: 30 bytes per logit
    # forward, 14 backward (see LOSS_BYTES_PER_LOGIT), at achievable HBM bandwidth.
    from meshplan.training.time.step import LOSS_BYTES_PER_LOGIT, LOSS_KERNELS, _embedding_and_head

    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(tp=2, global_batch_size=8, micro_batch_size=1), L8, cluster)
    ctx = cost_context(L8, plan, cluster, TrainingConstants())
    fwd, bwd = _embedding_and_head(ctx, plan.pp - 1)
    head = ctx.gemm(ctx.tokens, L8.vocab_size / 2, L8.hidden_size)
    logits = ctx.tokens * L8.vocab_size / 2
    rate = cluster.gpu.hbm_bandwidth_bytes_per_s * ctx.c.hbm_efficiency
    launches = LOSS_KERNELS // 2 * ctx.c.launch_s
    embed = ctx.memory(ctx.tokens * L8.hidden_size * ctx.act_width * 2)  # pp=1: one stage has both
    assert fwd - embed - head == pytest.approx(logits * LOSS_BYTES_PER_LOGIT[0] / rate + launches)
    assert bwd - 2 * embed - 2 * head == pytest.approx(logits * LOSS_BYTES_PER_LOGIT[1] / rate + launches)


def test_megatron_overlaps_tp_communication_under_sequence_parallel():
    on = resolve_plan(TrainingPlan(tp=8, framework="megatron", global_batch_size=8), L70,
                      Cluster.build("h100-sxm-80gb", 8))
    off = resolve_plan(TrainingPlan(tp=8, framework="megatron", sequence_parallel=False,
                                    global_batch_size=8), L70, Cluster.build("h100-sxm-80gb", 8))
    titan = resolve_plan(TrainingPlan(tp=8, framework="torchtitan", global_batch_size=8), L70,
                         Cluster.build("h100-sxm-80gb", 8))
    assert on.tp_comm_overlap and "tp_comm_overlap" in on.chosen
    assert not off.tp_comm_overlap and not titan.tp_comm_overlap
