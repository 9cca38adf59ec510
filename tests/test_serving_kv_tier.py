"""The CPU KV tier (kv_offload=cpu, meshplan.serving.engine.kvtier): prompt KV found in host memory is
copied back over the host link instead of recomputed; hits come from a given rate or from the
workload's prefix sharing through an LRU of kv_cpu_bytes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.hardware import Cluster
from meshplan.hardware.host import host_for
from meshplan.model import load_model
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.engine.kvtier import CpuTier, capacity_units
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

MODEL = load_model("llama-3.1-8b")
CLUSTER = Cluster.build(gpu="h100-sxm-80gb", num_gpus=1)
BYTES_PER_TOKEN = 32 * 8 * 256 * 2  # Llama-3.1-8B bf16 KV: 128 KiB per token


def one_at_a_time(L=4000, n=4):
    return synthesize(WorkloadSpec(arrival="concurrency", concurrency=1, num_requests=n, dataset="fixed",
                                   input_len=L, output_len=2), seed=0)


def test_given_hit_rate_prices_a_copy_instead_of_prefill():
    """One request at a time, prefix caching off: TTFT = the prefill of the (1-h) L tokens not
    found, over a context that starts after the h L found ones, + h L tokens over the host link."""
    L, h = 4000, 0.6
    plan = ServingPlan(prefix_caching=False, kv_offload="cpu", kv_hit_rate=h)
    wl = one_at_a_time(L)
    pool = resolve_pools(MODEL, CLUSTER, plan, wl)[0]
    cost = build_replicas(MODEL, CLUSTER, pool, wl, IterationLog(), 0)[0].cost
    found = int(h * L)
    n = L - found
    expected = cost(n, 1, 0, 0.0, n, n * (found + (n + 1) / 2), 1)
    expected += found * BYTES_PER_TOKEN / host_for("h100-sxm-80gb").link_bytes_per_s
    m = simulate(MODEL, CLUSTER, plan, wl).metrics
    assert m.ttft_ms.mean == pytest.approx(expected * 1e3, rel=1e-9)
    assert m.prefix_cache_hit_rate == pytest.approx(found / L)


def test_ttft_falls_as_the_hit_rate_rises_and_zero_changes_nothing():
    wl = one_at_a_time()
    ttft = [simulate(MODEL, CLUSTER, ServingPlan(prefix_caching=False, kv_offload="cpu", kv_hit_rate=h), wl)
            .metrics.ttft_ms.mean for h in (0.0, 0.3, 0.9)]
    assert ttft[0] > ttft[1] > ttft[2]
    assert simulate(MODEL, CLUSTER, ServingPlan(prefix_caching=False), wl).metrics.ttft_ms.mean == ttft[0]


def shared_prefixes():
    """200 system prompts of 4000 tokens: more than a 30%-memory GPU cache keeps."""
    return synthesize(WorkloadSpec(arrival="poisson", request_rate=4.0, num_requests=500, dataset="random",
                                   input_len=200, output_len=100, shared_prefix_len=4000, num_prefixes=200), seed=0)


def test_cpu_tier_from_prefix_sharing_recovers_what_the_gpu_cache_evicts():
    wl = shared_prefixes()
    small = dict(gpu_memory_utilization=0.3)
    gpu_only = simulate(MODEL, CLUSTER, ServingPlan(**small), wl).metrics
    tiers = [simulate(MODEL, CLUSTER, ServingPlan(**small, kv_offload="cpu", kv_cpu_bytes=gib * 2**30), wl).metrics
             for gib in (16, 64, 256)]
    hits = [gpu_only.prefix_cache_hit_rate] + [m.prefix_cache_hit_rate for m in tiers]
    assert hits == sorted(hits) and hits[-1] > hits[0] + 0.3
    assert tiers[-1].ttft_ms.mean < gpu_only.ttft_ms.mean


def test_capacity_and_lru_by_hand():
    # 64 GiB over a tp=2 replica, 64 KiB per token per GPU, 16-token units
    assert capacity_units(64 * 2**30, 2, 64 * 2**10, 16) == 64 * 2**30 // (2 * 64 * 2**10 * 16)
    tier = CpuTier(2, None, 1e-6)
    tier.store((1, 2))
    assert tier.found((1, 2, 3), prompt=100, gpu_tokens=0, unit_tokens=16) == 32
    tier.store((3,))  # evicts unit 1 (least recently used)
    assert tier.found((1, 2, 3), prompt=100, gpu_tokens=0, unit_tokens=16) == 0
    assert tier.found((1, 2, 3), prompt=100, gpu_tokens=16, unit_tokens=16) == 32
    assert tier.found((1, 2, 3), prompt=40, gpu_tokens=16, unit_tokens=16) == 23  # the last token is computed
    rate = CpuTier(0, 0.5, 1e-6)
    assert rate.found((), prompt=1000, gpu_tokens=100, unit_tokens=16) == 400
    assert rate.found((), prompt=1000, gpu_tokens=600, unit_tokens=16) == 0


runner = CliRunner()
BASE = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "20"]


@pytest.mark.parametrize("extra, message", [
    (["--kv-offload", "cpu", "--kv-hit-rate", "-0.1"], "--kv-hit-rate -0.1"),
    (["--kv-offload", "cpu", "--kv-hit-rate", "1.5"], "--kv-hit-rate 1.5"),
    (["--kv-offload", "cpu"], "needs kv_cpu_bytes"),
    (["--kv-hit-rate", "0.5"], "set kv_offload='cpu'"),
    (["--kv-offload", "disk", "--kv-hit-rate", "0.5"], "--kv-offload 'disk'"),
])
def test_bad_tier_input_is_one_message_exit_2(extra, message):
    out = runner.invoke(app, [*BASE, *extra])
    assert out.exit_code == 2 and message in out.output


def test_cli_runs_a_cpu_tier():
    out = runner.invoke(app, [*BASE, "--kv-offload", "cpu", "--kv-cpu-gib", "64", "--shared-prefix-len", "1000",
                              "--json"])
    assert out.exit_code == 0, out.output


def test_exporters_write_the_cpu_tier():
    from meshplan.errors import ConfigError
    from meshplan.export.serving import export_serving
    from meshplan.serving.plan import Disaggregation
    from tests.test_serving_export import KNOWN, servers

    plan = ServingPlan(tp=2, kv_offload="cpu", kv_cpu_bytes=200 * 2**30)
    [words] = servers("vllm", export_serving("vllm", "meta-llama/Llama-3.1-8B-Instruct", plan))
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE=100.0" in words and "LMCACHE_LOCAL_CPU=True" in words
    assert '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}' in words
    sglang = plan.model_copy(update={"engine": "sglang", "kv_cpu_bytes": 200e9})
    [words] = servers("sglang", export_serving("sglang", "meta-llama/Llama-3.1-8B-Instruct", sglang))
    assert words[words.index("--hicache-size") + 1] == "100" and "--enable-hierarchical-cache" in words
    assert {w for w in words if w.startswith("--")} <= KNOWN["sglang"] | {"--enable-hierarchical-cache", "--hicache-size"}
    split = ServingPlan(kv_offload="cpu", kv_hit_rate=0.5,
                        disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=1))
    with pytest.raises(ConfigError, match="one --kv-transfer-config"):
        export_serving("vllm", "meta-llama/Llama-3.1-8B-Instruct", split)
