"""Offline runs of a streamed workload in bounded memory (#32 item 7): every request arrives at
t=0, and each replica's share waits unbuilt in its backlog (meshplan.serving.engine.backlog) until
its queue reaches it. The schedule must be the one the arrival events give when every request is
built up front, and the memory must not grow with the number of requests."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from meshplan import Cluster, load_model
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import Simulation
from meshplan.serving.traffic import stream as traffic_stream
from meshplan.serving.traffic.stream import stream_workload
from meshplan.serving.traffic.workload import Workload, WorkloadSpec

MODEL = load_model("llama-3.1-8b")
SHAREGPT = WorkloadSpec(num_requests=2000, dataset="sharegpt")
LONG = WorkloadSpec(num_requests=2000, input_len=1024, output_len=128, range_ratio=0.5)


def _built(stream) -> Workload:
    """The same requests, all built: the simulator then feeds them through its arrival events."""
    return Workload(requests=list(stream.requests), seed=stream.seed)


@pytest.mark.parametrize(("plan", "spec"), [
    (ServingPlan(), SHAREGPT),
    (ServingPlan(replicas=3, router="round-robin"), LONG),
    (ServingPlan(replicas=2, router="prefix-affinity"), SHAREGPT),
    (ServingPlan(engine="sglang"), SHAREGPT),
    (ServingPlan(max_num_seqs=64, gpu_memory_utilization=0.3), LONG),  # preempts: requests go back in front
    (ServingPlan(disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=2)), LONG),
    (ServingPlan(disaggregated=Disaggregation(decode_gpus=1)), SHAREGPT),
], ids=["vllm", "3-replicas", "affinity-without-keys", "sglang", "preempting", "disaggregated", "decode-pool"])
def test_backlogged_offline_runs_equal_the_arrival_events_request_for_request(plan, spec):
    cluster = Cluster.build("h100-sxm-80gb", plan.num_gpus)
    stream = stream_workload(spec, seed=4)
    built = _built(stream)
    sim = Simulation(MODEL, cluster, plan, stream, streaming=False)
    assert sim.backlogs and sim.groups[0][0].backlog is None
    lazy, eager = sim.run(), Simulation(MODEL, cluster, plan, built, streaming=False).run()
    assert lazy.iterations == eager.iterations and lazy.simulated_s == eager.simulated_s
    assert [(r.id, r.replica, r.first_token_s, r.finish_s, r.preemptions) for r in lazy.records] == [
        (r.id, r.replica, r.first_token_s, r.finish_s, r.preemptions) for r in eager.records]
    assert all(np.array_equal(a.token_times_s, b.token_times_s) for a, b in zip(lazy.records, eager.records))
    a, b = lazy.log.columns(), eager.log.columns()
    assert all(np.array_equal(a[c], b[c]) for c in a), [c for c in a if not np.array_equal(a[c], b[c])]
    assert lazy.metrics.to_dict() == eager.metrics.to_dict()
    assert sim.groups[0][0].backlog.count == 0
    if plan.gpu_memory_utilization:  # the case meant to preempt does
        assert sum(r.preemptions for r in lazy.records) > 0


def test_streamed_metrics_of_a_backlogged_run_equal_the_arrival_events_ones():
    plan, cluster = ServingPlan(replicas=2), Cluster.build("h100-sxm-80gb", 2)
    stream = stream_workload(LONG, seed=1)
    lazy = Simulation(MODEL, cluster, plan, stream).run()
    eager = Simulation(MODEL, cluster, plan, _built(stream), streaming=True).run()
    assert lazy.streamed and eager.streamed and lazy.iterations == eager.iterations
    assert lazy.metrics.to_dict() == eager.metrics.to_dict() and lazy.timeseries() == eager.timeseries()


def test_a_strided_reader_gives_the_requests_indexing_gives_across_chunks(monkeypatch):
    monkeypatch.setattr(traffic_stream, "CHUNK", 100)
    requests = stream_workload(WorkloadSpec(num_requests=1050, dataset="sharegpt"), seed=2).requests
    for first, step in ((0, 1), (3, 4), (7, 250), (1049, 3)):
        assert list(requests.strided(first, step)) == [requests[i] for i in range(first, 1050, step)]


def test_multi_lora_offline_runs_build_every_request_up_front():
    """Multi-LoRA admission looks past the head of the queue, so it keeps the arrival events."""
    sim = Simulation(MODEL, Cluster.build("h100-sxm-80gb", 1), ServingPlan(lora_adapters=4),
                     stream_workload(WorkloadSpec(num_requests=50, input_len=256, output_len=16)))
    assert not sim.backlogs and sim.run().metrics.completed == 50


CHILD = """
import json, resource
from meshplan import Cluster, load_model
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import Simulation
from meshplan.serving.traffic import stream
from meshplan.serving.traffic.workload import WorkloadSpec

stream.CHUNK = 4096  # both runs hold chunks of one size
model, cluster = load_model("llama-3.2-1b"), Cluster.build("h100-sxm-80gb", 1)
plan = ServingPlan(max_num_seqs=1024, max_num_batched_tokens=16384)
out = []
for n in (20_000, 200_000):
    spec = WorkloadSpec(num_requests=n, dataset="fixed", input_len=16, output_len=1)
    sim = Simulation(model, cluster, plan, stream.stream_workload(spec, seed=0))
    out.append((sim.backlogs, sim.run().metrics.completed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_offline_memory_does_not_grow_with_the_number_of_requests():
    """20,000 then 200,000 offline requests (short ones on a small model, so the run takes
    seconds) in one fresh process: the second run must not raise its peak resident memory.
    Built up front, the 180,000 more requests take about 120 MiB (their engine state and
    records); the bound leaves 20 MiB for the allocator. (tracemalloc would measure the same
    five times slower.)"""
    pytest.importorskip("resource")
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    (lazy_small, done_small, kib_small), (lazy_large, done_large, kib_large) = json.loads(run.stdout)
    assert lazy_small and lazy_large and (done_small, done_large) == (20_000, 200_000)
    assert kib_large - kib_small < 20 * 1024, (kib_small, kib_large)
