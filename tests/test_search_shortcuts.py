"""The plan search's shortcuts give the answers of the full model (issue #20):

- the pipeline step-time lower bound never exceeds the simulation, and equals it where the closed
  form holds (1F1B and GPipe over equal stages, no p2p: (m + pp - 1)(f + b), Narayanan et al.
  2021, eq. 1);
- simulating only the plans whose bound can still rank gives the ranking costing every plan gives,
  for every objective and list length;
- `fits_memory` agrees with `estimate_memory(...).fits`;
- the per-layer time and saved-bytes caches return what a fresh computation returns.
"""

from __future__ import annotations

import random

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.memory import activations as act
from meshplan.training.time import step as step_mod
from meshplan.training.time.context import cost_context
from meshplan.training.estimate import estimate_step, step_parts
from meshplan.training.time.layer import layer_time
from meshplan.training.memory.total import estimate_memory, fits_memory
from meshplan.training.pipeline.simulate import StageTimes, simulate_pipeline, step_lower_bound
from meshplan.training.search.plans import candidates, score, search
from meshplan.training.search.sweep import identity as _identity, launchable as _launchable


def _random_stages(rng: random.Random, pp: int, vpp: int, equal: bool) -> list[StageTimes]:
    def one() -> StageTimes:
        f = [rng.uniform(0.5, 2.0) for _ in range(vpp)]
        return StageTimes(forward_s=tuple(f), backward_s=tuple(x * rng.uniform(1.5, 3.0) for x in f))

    first = one()
    return [first if equal else one() for _ in range(pp)]


def test_lower_bound_never_exceeds_the_simulation():
    rng = random.Random(7)
    for _ in range(600):
        schedule = rng.choice(["gpipe", "1f1b", "interleaved", "zero-bubble"])
        pp = rng.choice([1, 2, 3, 4, 8])
        vpp = rng.choice([2, 3]) if schedule == "interleaved" else 1
        m = pp * rng.choice([1, 2, 3]) if schedule == "interleaved" else rng.randint(1, 12)
        stages = _random_stages(rng, pp, vpp, equal=rng.random() < 0.3)
        hop = rng.choice([0.0, 0.01, 0.5])
        simulated = simulate_pipeline(schedule, stages, m, hop, with_events=False).step_time_s
        assert step_lower_bound(schedule, stages, m, hop) <= simulated * (1 + 1e-12)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("pp,m", [(1, 1), (2, 3), (4, 4), (8, 16), (4, 2)])
def test_lower_bound_is_the_closed_form_on_equal_stages(schedule, pp, m):
    stages = [StageTimes(forward_s=(1.0,), backward_s=(2.0,))] * pp
    simulated = simulate_pipeline(schedule, stages, m, 0.0, with_events=False).step_time_s
    assert step_lower_bound(schedule, stages, m, 0.0) == pytest.approx(simulated, rel=1e-12)
    assert simulated == pytest.approx((m + pp - 1) * 3.0)


CASES = [("llama-3.1-70b", 64, 4096, 128, "megatron"), ("mixtral-8x7b", 32, 4096, 128, "megatron"),
         ("llama-3.1-8b", 16, 8192, 64, "torchtitan")]


def _fitting(model, cluster, base):
    seen, out = set(), []
    for plan in candidates(base, model, cluster, {}):
        resolved = _launchable(plan, model, cluster)
        if isinstance(resolved, str) or _identity(resolved) in seen:
            continue
        seen.add(_identity(resolved))
        memory = estimate_memory(model, cluster, resolved)
        assert fits_memory(model, cluster, resolved) == memory.fits
        if memory.fits:
            out.append(resolved)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pruned_search_ranks_like_costing_every_plan(case):
    name, gpus, seq, batch, framework = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework)
    every = [estimate_step(model, cluster, p, with_memory=False) for p in _fitting(model, cluster, base)]
    for objective, extra in (("throughput", {}), ("cost", {"price_per_gpu_hour": 2.5}),
                             ("time-to-train", {"train_tokens": 1e12})):
        full = sorted(every, key=lambda e: score(e, objective, extra.get("price_per_gpu_hour"),
                                                 gpus, extra.get("train_tokens")))
        for top in (1, 10):
            result = search(model, cluster, base, {}, objective=objective, top=top, **extra)
            assert [e.plan for e in result.ranked] == [e.plan for e in full[:top]]
            assert [e.step_time_s for e in result.ranked] == [e.step_time_s for e in full[:top]]
            assert all(e.memory is not None and e.memory.fits for e in result.ranked)


def test_bound_of_each_plan_is_below_its_step():
    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 32)
    base = TrainingPlan(seq_len=4096, global_batch_size=128, framework="megatron")
    for plan in _fitting(model, cluster, base)[:200]:
        parts = step_parts(model, cluster, plan)
        assert parts.lower_bound_s() <= estimate_step(model, cluster, plan).step_time_s * (1 + 1e-12)


def test_layer_time_and_saved_bytes_caches_match_a_fresh_computation():
    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 64)
    base = TrainingPlan(seq_len=4096, global_batch_size=256, framework="megatron")
    plans = [r for r in (_launchable(p, model, cluster) for p in candidates(base, model, cluster, {}))
             if not isinstance(r, str)]
    rng = random.Random(3)
    for plan in rng.sample(plans, 60):
        ctx = cost_context(model, plan, cluster)
        cached = step_mod._layer_cache(ctx)
        for layer in set(model.layers):
            assert cached[layer] == layer_time(ctx, layer)
            for selective in (False, True):
                assert act.layer_activation_bytes(layer, model, plan, selective) == \
                    act._layer_activation_bytes(layer, model, plan, selective)
