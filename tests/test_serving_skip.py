"""The simulator's decode fast-forward (Replica.skip_decodes) changes nothing: every scenario's
metrics, iteration count and iteration log are identical with it switched off."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan import Cluster, load_model
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.engine.replica import Replica
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

CASES = {
    "offline vllm": (ServingPlan(), dict(num_requests=120, input_len=512, output_len=200)),
    "poisson sharegpt": (ServingPlan(), dict(num_requests=120, arrival="poisson", request_rate=6.0, dataset="sharegpt")),
    "closed loop": (ServingPlan(), dict(num_requests=100, arrival="concurrency", concurrency=12, input_len=800, output_len=150)),
    "sglang tp2": (ServingPlan(engine="sglang", tp=2), dict(num_requests=120, input_len=1500, output_len=300)),
    "trtllm reserve": (ServingPlan(engine="tensorrt-llm", engine_version="0.13", tp=2),
                       dict(num_requests=100, input_len=128, output_len=600)),
    "disaggregated": (ServingPlan(disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=1)),
                      dict(num_requests=80, arrival="poisson", request_rate=8.0, input_len=400, output_len=150)),
    "prefix sharing, kv pressure": (ServingPlan(max_num_seqs=256), dict(num_requests=150, input_len=3000, output_len=600,
                                                                       shared_prefix_len=1000, num_prefixes=3)),
    "pipeline": (ServingPlan(tp=2, pp=2), dict(num_requests=80, input_len=600, output_len=300)),
    # replicas run ahead of each other's events up to the next arrival
    "two replicas, identical offline": (ServingPlan(replicas=2), dict(num_requests=120, input_len=512, output_len=200)),
    "three replicas, poisson": (ServingPlan(replicas=3, router="least-outstanding"),
                                dict(num_requests=150, arrival="poisson", request_rate=9.0, dataset="sharegpt")),
    "two replicas, kv pressure": (ServingPlan(replicas=2, max_num_seqs=256),
                                  dict(num_requests=150, arrival="poisson", request_rate=20.0, input_len=3000,
                                       output_len=600, shared_prefix_len=1000, num_prefixes=3)),
    "two replicas, closed loop": (ServingPlan(replicas=2), dict(num_requests=100, arrival="concurrency", concurrency=12,
                                                                input_len=800, output_len=150)),
    "vllm v0 multi-step, poisson": (ServingPlan(num_scheduler_steps=8), dict(num_requests=150, arrival="poisson",
                                                                             request_rate=9.0, dataset="sharegpt")),
    "vllm v0 multi-step, offline": (ServingPlan(num_scheduler_steps=4, max_num_seqs=64),
                                    dict(num_requests=120, input_len=512, output_len=200)),
    "int4 kv": (ServingPlan(kv_cache_dtype="int4", what_if=True), dict(num_requests=120, input_len=2000, output_len=300)),
    "decode pool alone": (ServingPlan(disaggregated=Disaggregation(decode_gpus=1)),
                          dict(num_requests=100, arrival="concurrency", concurrency=24, input_len=1500, output_len=200)),
    "prefill pool alone": (ServingPlan(disaggregated=Disaggregation(prefill_gpus=2, prefill_tp=2)),
                           dict(num_requests=100, arrival="poisson", request_rate=20.0, input_len=1500, output_len=200)),
}


def run(plan: ServingPlan, spec: dict):
    model = load_model("llama-3.1-8b")
    cluster = Cluster.build("h100-sxm-80gb", max(plan.num_gpus, 1))
    return simulate(model, cluster, plan, synthesize(WorkloadSpec(**spec), seed=3))


@pytest.mark.parametrize("case", list(CASES))
def test_fast_forward_is_exact(case, monkeypatch):
    plan, spec = CASES[case]
    fast = run(plan, spec)
    monkeypatch.setattr(Replica, "skip_decodes", lambda self, now, horizon: (now, 0))
    slow = run(plan, spec)
    assert fast.iterations == slow.iterations
    assert fast.metrics == slow.metrics
    assert [r.id for r in fast.records] == [r.id for r in slow.records]
    for column in ("replica", "start_s", "end_s", "decode_seqs", "kv_used_blocks", "kind"):
        assert np.array_equal(fast.log.column(column), slow.log.column(column)), column


@pytest.mark.parametrize("case", ["offline vllm", "sglang tp2", "pipeline", "trtllm reserve", "int4 kv"])
def test_vectorised_cost_is_the_per_iteration_cost(case, monkeypatch):
    """The stretches use IterationCost.batch; every row must be bit-identical to __call__ (the
    fast-forward's exactness rests on it), over decode, prefill and mixed iterations."""
    seen: list = []
    original = Replica.skip_decodes

    def spy(self, now, horizon):
        seen.append(self.cost)
        return original(self, now, horizon)

    monkeypatch.setattr(Replica, "skip_decodes", spy)
    run(*CASES[case])
    cost = seen[0]
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(400):
        dec, pre = int(rng.integers(0, 300)), int(rng.integers(0, 3000)) * int(rng.integers(0, 2))
        seqs = dec + int(rng.integers(0, 4)) * (pre > 0)
        rows.append((dec + pre, max(seqs, 1), dec, float(dec * rng.integers(1, 4000)), pre,
                     pre * (pre + 1) / 2, max(dec, 1)))
    batch = cost.batch(np.array(rows, dtype=float))
    assert [cost(*r) for r in rows] == batch.tolist()


def test_long_decode_runs_go_through_the_vectorised_stretches(monkeypatch):
    calls: list[int] = []
    original = Replica._record_stretch

    def spy(self, now, ends, grown):
        calls.append(len(ends))
        return original(self, now, ends, grown)

    monkeypatch.setattr(Replica, "_record_stretch", spy)
    run(*CASES["offline vllm"])
    assert calls and max(calls) > 10
