"""Multi-LoRA serving (meshplan.serving.cost.lora): adapter slots in HBM, batched LoRA kernels,
at most max_loras adapters per batch, LRU residency with host-to-GPU copies, popularity, the
engines' flags, and one clear error where it is not available."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.export.serving import export_serving
from meshplan.hardware import Cluster
from meshplan.hardware.host import host_for
from meshplan.model import load_model
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.cost.lora import (
    AdapterSlots, adapter_bytes, adapter_params, assign_adapters, layer_widths, lora_time,
)
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.engine.replica import Replica
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from tests.test_serving_export import KNOWN, servers

MODEL = load_model("llama-3.1-8b")
CLUSTER = Cluster.build(gpu="h100-sxm-80gb", num_gpus=8)
H, I, KV = 4096, 14336, 8 * 128


def workload(n=300, **extra):
    return synthesize(WorkloadSpec(arrival="poisson", request_rate=12.0, num_requests=n, dataset="fixed",
                                   input_len=512, output_len=128, **extra), seed=1)


def test_adapter_weights_by_hand():
    # q, k, v, o + gate, up, down of Llama-3.1-8B: r x (d_in + d_out) each, 32 layers
    per_layer = (H + H) + 2 * (H + KV) + (H + H) + 2 * (H + I) + (I + H)
    assert adapter_params(MODEL, 16) == 16 * 32 * per_layer
    # tp=2 (vLLM's layout): column-parallel keeps A whole and halves B; row-parallel the reverse
    local = (H + H / 2) + 2 * (H + KV / 2) + (H / 2 + H) + 2 * (H + I / 2) + (I / 2 + H)
    assert adapter_bytes(list(MODEL.layers), MODEL, 2, 16) == 16 * 32 * local * 2


def test_lora_kernel_time_by_hand():
    widths = layer_widths(list(MODEL.layers), MODEL, 1)
    d_in, d_out, packed = widths
    assert packed == 4 * 32
    t, a, r = 256, 3, 16
    weights, acts = a * r * (d_in + d_out) * 2, t * (d_in + 2 * d_out + 2 * r * packed) * 2
    flops = 2 * t * r * (d_in + d_out)
    expected = max((weights + acts) * 1e-12, flops * 1e-15) + 2 * packed * 3e-6
    assert lora_time(t, a, r, widths, hbm_s_per_byte=1e-12, flop_s=1e-15, launch_s=3e-6) == pytest.approx(expected)
    assert lora_time(t, 0, r, widths, hbm_s_per_byte=1e-12, flop_s=1e-15, launch_s=3e-6) == 0.0


def pool_of(plan, wl=None):
    wl = wl or workload(10)
    pool = resolve_pools(MODEL, CLUSTER, plan, wl)[0]
    return pool, build_replicas(MODEL, CLUSTER, pool, wl, IterationLog(), 0)[0]


def test_adapter_slots_come_out_of_the_kv_cache():
    base, _ = pool_of(ServingPlan())
    lora, replica = pool_of(ServingPlan(lora_adapters=50, max_loras=4, lora_rank=64))
    slot = adapter_bytes(list(MODEL.layers), MODEL, 1, 64)
    assert base.memory.kv_bytes - lora.memory.kv_bytes == pytest.approx(4 * slot)
    assert lora.memory.kv_tokens < base.memory.kv_tokens
    assert replica.lora.slots == 4
    assert replica.lora.load_s == pytest.approx(slot / host_for("h100-sxm-80gb").link_bytes_per_s)


def test_engine_default_slots():
    assert pool_of(ServingPlan(lora_adapters=5))[1].lora.slots == 1  # vLLM --max-loras
    assert pool_of(ServingPlan(engine="sglang", lora_adapters=5))[1].lora.slots == 8  # --max-loras-per-batch


def test_lru_residency_loads_only_missing_adapters_and_evicts_idle_ones():
    slots = AdapterSlots(2, 0.01)
    assert slots.make_resident({1}) == 1 and slots.make_resident({1, 2}) == 1
    assert slots.make_resident({2, 3}) == 1  # 1 was idle: it leaves
    assert list(slots.resident) == [2, 3] and slots.loads == 3
    assert slots.admissible(3, {2, 3}) and not slots.admissible(4, {2, 3}) and slots.admissible(4, {2})


def test_a_batch_never_holds_more_adapters_than_slots(monkeypatch):
    seen = []
    original = Replica._duration

    def spy(self):
        seen.append(len(self._adapters()))
        return original(self)

    monkeypatch.setattr(Replica, "_duration", spy)
    result = simulate(MODEL, CLUSTER, ServingPlan(lora_adapters=12, max_loras=3), workload())
    assert max(seen) == 3 and result.metrics.completed == 300
    assert result.adapter_loads >= 12


def test_lora_costs_time_and_more_adapters_per_slot_cost_more():
    wl = workload()
    base = simulate(MODEL, CLUSTER, ServingPlan(), wl).metrics
    one = simulate(MODEL, CLUSTER, ServingPlan(lora_adapters=1), wl).metrics
    assert one.tpot_ms.mean > base.tpot_ms.mean
    crowded = simulate(MODEL, CLUSTER, ServingPlan(lora_adapters=64, max_loras=4), wl).metrics
    roomy = simulate(MODEL, CLUSTER, ServingPlan(lora_adapters=64, max_loras=32), wl).metrics
    assert crowded.e2e_ms.mean > roomy.e2e_ms.mean
    rank = simulate(MODEL, CLUSTER, ServingPlan(lora_adapters=64, max_loras=32, lora_rank=128), wl).metrics
    assert rank.tpot_ms.mean > roomy.tpot_ms.mean


def test_zipf_popularity_concentrates_on_few_adapters():
    uniform = assign_adapters(10_000, 100, "uniform", 1.0, seed=0)
    zipf = assign_adapters(10_000, 100, "zipf", 1.2, seed=0)
    assert uniform.min() == 0 and uniform.max() == 99
    assert (zipf == 0).mean() > 5 * (uniform == 0).mean()
    assert (assign_adapters(50, 7, "zipf", 1.0, seed=3) == assign_adapters(50, 7, "zipf", 1.0, seed=3)).all()
    plan = ServingPlan(lora_adapters=100, max_loras=8)
    loads = {pop: simulate(MODEL, CLUSTER, plan, workload(lora_popularity=pop)).adapter_loads
             for pop in ("uniform", "zipf")}
    assert loads["zipf"] < loads["uniform"]


def test_popularity_does_not_change_the_rest_of_the_workload():
    a, b = workload(50), workload(50, lora_popularity="zipf", lora_zipf_exponent=2.0)
    assert [(r.arrival_s, r.input_len, r.output_len) for r in a.requests] == \
        [(r.arrival_s, r.input_len, r.output_len) for r in b.requests]
    with pytest.raises(ConfigError, match="lora_zipf_exponent is only used with lora_popularity='zipf'"):
        WorkloadSpec(lora_zipf_exponent=2.0)


def test_default_plan_has_no_lora_and_unchanged_memory():
    pool, replica = pool_of(ServingPlan())
    assert replica.lora is None and replica.cost.lora(100, 3) == 0.0


@pytest.mark.parametrize("plan, message", [
    (ServingPlan(engine="tensorrt-llm", lora_adapters=2), "modeled for vLLM and SGLang, not tensorrt-llm"),
    (ServingPlan(engine_version="0.2.7", lora_adapters=2), "vllm 0.2.7 has no multi-LoRA serving"),
    (ServingPlan(engine="sglang", engine_version="0.2.15", lora_adapters=2), "it arrived in sglang 0.3.0"),
    (ServingPlan(lora_adapters=2, disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=1)),
     "disaggregated pools is not modeled"),
])
def test_lora_where_unavailable_is_one_clear_error(plan, message):
    with pytest.raises(ConfigError, match=message):
        resolve_pools(MODEL, CLUSTER, plan, workload(5))


def test_lora_on_mla_is_refused():
    with pytest.raises(ConfigError, match="multi-head latent attention"):
        resolve_pools(load_model("deepseek-v3"), Cluster.build(gpu="h200-sxm-141gb", num_gpus=8),
                      ServingPlan(lora_adapters=2, tp=8, weights_dtype="fp8"), workload(5))


runner = CliRunner()


def test_cli_reports_adapter_loads_and_refuses_bad_lora():
    base = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "40",
            "--request-rate", "5"]
    out = runner.invoke(app, [*base, "--lora-adapters", "10", "--max-loras", "4", "--lora-popularity", "zipf"])
    assert out.exit_code == 0, out.output
    assert re.search(r"LoRA: 10 adapters of rank 16, 4 resident per replica; \d+ host-to-GPU adapter loads", " ".join(out.output.split()))
    bad = runner.invoke(app, [*base, "--lora-adapters", "3", "--engine", "tensorrt-llm"])
    assert bad.exit_code == 2 and "not tensorrt-llm" in bad.output
    bad = runner.invoke(app, [*base, "--lora-adapters", "3", "--lora-popularity", "pareto"])
    assert bad.exit_code == 2 and "lora_popularity" in bad.output


VLLM_LORA_FLAGS = {"--enable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-modules"}
SGLANG_LORA_FLAGS = {"--enable-lora", "--lora-paths", "--max-loras-per-batch", "--max-lora-rank"}


@pytest.mark.parametrize("target, flags", [("vllm", VLLM_LORA_FLAGS), ("sglang", SGLANG_LORA_FLAGS)])
def test_exporters_write_the_engines_lora_flags(target, flags):
    plan = ServingPlan(engine=target, lora_adapters=20, max_loras=4, lora_rank=24)
    text = export_serving(target, "meta-llama/Llama-3.1-8B-Instruct", plan)
    [words] = servers(target, text)
    used = {w for w in words if w.startswith("--")}
    assert flags <= used and used <= KNOWN[target] | flags
    assert 'LORA_ADAPTERS="${LORA_ADAPTERS:?' in text and "$LORA_ADAPTERS" in words
    if target == "vllm":
        assert words[words.index("--max-loras") + 1] == "4"
        assert words[words.index("--max-lora-rank") + 1] == "32"  # vLLM's next allowed rank
        assert words[words.index("--max-cpu-loras") + 1] == "20"
    else:
        assert words[words.index("--max-loras-per-batch") + 1] == "4"
    assert "--enable-lora" not in export_serving(target, "meta-llama/Llama-3.1-8B-Instruct", ServingPlan(engine=target))
