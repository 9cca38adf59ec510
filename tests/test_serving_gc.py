"""`Simulation.run` and the training plan search pause the cyclic garbage collector
(`meshplan.gcpause`): the simulator must make no reference cycles (or a long run would keep its
garbage until the end), and the collector's state is restored whatever happens."""

from __future__ import annotations

import gc

import pytest

import meshplan
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.gcpause import cyclic_gc_paused
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

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


def test_a_plan_search_pauses_the_collector_and_restores_it(monkeypatch):
    """The training plan search runs with the collector paused too, and leaves it as it was."""
    from meshplan.training import TrainingPlan
    from meshplan.training.search import plans as search_module

    states = []
    original = search_module._search
    monkeypatch.setattr(search_module, "_search", lambda *a: states.append(gc.isenabled()) or original(*a))
    model, cluster = meshplan.load_model("llama-3.1-8b"), meshplan.Cluster.build("h100-sxm-80gb", 8)
    assert search_module.search(model, cluster, TrainingPlan(seq_len=4096, global_batch_size=64), {}).ranked
    assert states == [False] and gc.isenabled()
