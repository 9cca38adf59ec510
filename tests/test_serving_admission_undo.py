"""A request whose prefill blocks cannot be reserved at admission goes back to the queue
entirely: out of the running set and the prefilling set too. It used to stay in both, was
scheduled twice (once as a running prefill, once re-admitted), and the second completion of its
prefill crashed the simulator with a KeyError (multi-turn sessions under a tight KV pool)."""

from __future__ import annotations

from meshplan import Cluster, load_model
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize


def test_tight_pool_multi_turn_run_completes_every_request_once() -> None:
    spec = WorkloadSpec(arrival="poisson", request_rate=3, num_requests=300, dataset="random",
                        input_len=2000, output_len=200, turns=5, think_time_s=10.0)
    result = simulate(load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 1),
                      ServingPlan(gpu_memory_utilization=0.35), synthesize(spec, seed=0))
    assert len(result.records) == 300
    assert sum(r.preemptions for r in result.records) > 0  # the pool really was tight
    for r in result.records:
        assert r.first_token_s is not None and r.first_token_s >= r.arrival_s


def test_sglang_admits_a_long_prompt_only_when_its_whole_prompt_and_output_fit() -> None:
    """SGLang's PrefillAdder (schedule_policy.py, 0.5.6.post2 wheel) admits a request only when its
    whole prompt plus min(output, 4096) fits in the KV left after the running requests' clipped
    future tokens x new-token ratio. Admitting on the first 8,192-token chunk alone let 24
    concurrent 32,000-token prompts of Qwen3-14B on one H100 (about 220k KV tokens) all start,
    fill the cache half-prefilled and stall: no request ever finished (GPUStack's lab runs 100
    such prompts on SGLang to completion)."""
    spec = WorkloadSpec(arrival="concurrency", concurrency=24, num_requests=24, dataset="random",
                        input_len=32000, output_len=100, range_ratio=0.0)
    result = simulate(load_model("qwen3-14b"), Cluster.build("h100-sxm-80gb", 1),
                      ServingPlan(engine="sglang", weights_dtype="fp8"), synthesize(spec, seed=0))
    assert result.metrics.completed == 24
    firsts = sorted(r.first_token_s for r in result.records)
    assert firsts[-1] > 3 * firsts[0]  # later prompts waited for room instead of all starting
