"""`Simulation.run` pauses the cyclic garbage collector: the simulator must make no reference
cycles (or a long run would keep its garbage until the end), and the collector's state is
restored whatever happens."""

from __future__ import annotations

import gc

import pytest

import meshplan
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import cyclic_gc_paused, simulate
from meshplan.serving.workload import WorkloadSpec, synthesize

PLANS = {
    "vllm": dict(engine="vllm"),
    "sglang-prefix": dict(engine="sglang", prefix_caching=True),
    "trtllm-replicas": dict(engine="tensorrt-llm", dp=2, router="least-outstanding"),
    "vllm-disaggregated": dict(engine="vllm", disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=1)),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_a_run_leaves_no_cyclic_garbage(name):
    model, cluster = meshplan.load_model("llama-3.1-8b"), meshplan.Cluster.build("h100-sxm-80gb", 2)
    spec = WorkloadSpec(num_requests=60, arrival="poisson", request_rate=20.0, turns=2,
                        shared_prefix_len=64)
    workload = synthesize(spec, 3)
    gc.collect()
    gc.disable()
    try:
        result = simulate(model, cluster, ServingPlan(**PLANS[name]), workload)
        assert result.metrics.completed == 60
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_collector_state_restored():
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
