"""The memory model's exact shortcuts give the answers of the full computation:

- the plain-Python activation-peak walk equals the numpy matrix product it replaces, bit for
  bit, wherever it is taken (whole-number chunk bytes), and other inputs still take numpy;
- `fits_memory`'s floor (a stage's total without activations) and its skip of stages dominated by
  one of the same signature never change the verdict `estimate_memory(...).fits` gives, including
  plans with activation offload, interleaving and uneven splits;
- the cached pipeline layout (chunk kinds, stage signatures) is what walking the layers gives;
- memos shared by plans that differ only in fields they do not read (stage memory, the
  data-parallel traffic and optimizer step) give what a fresh computation of each plan gives.
"""

from __future__ import annotations

import random

import pytest

from meshplan import Cluster, load_model
from meshplan.model.counts import layer_kinds
from meshplan.training import TrainingPlan
from meshplan.training.time import context
from meshplan.training.pipeline import peak_walk
from meshplan.training.memory import states
from meshplan.training.layout.groups import plan_groups
from meshplan.training.memory.total import estimate_memory, fits_memory, stage_memory
from meshplan.training.search.plans import candidates
from meshplan.training.search.sweep import launchable as _launchable
from meshplan.training.memory.states import stage_chunk_kinds, stage_signatures


def _shapes(rng: random.Random, n: int):
    for _ in range(n):
        schedule = rng.choice(["gpipe", "1f1b", "interleaved", "zero-bubble"])
        pp = rng.choice([2, 3, 4, 8])
        vpp = rng.choice([2, 3, 4]) if schedule == "interleaved" else 1
        m = pp * rng.choice([1, 2, 3, 5]) if schedule == "interleaved" else rng.randint(1, 12)
        yield schedule, pp, vpp, m, rng.randrange(pp)


def test_python_walk_equals_the_numpy_product():
    rng = random.Random(11)
    for key in _shapes(rng, 400):
        vpp = key[2]
        chunk_bytes = [float(rng.choice([0, rng.randrange(0, 2**34)])) for _ in range(vpp)]
        head = rng.choice([0.0, float(rng.randrange(1, 2**33)), rng.uniform(1.0, 1e10)])
        assert peak_walk._exact(key, chunk_bytes)
        expected = peak_walk._numpy_peak(peak_walk.alive_counts(*key), chunk_bytes, head)
        assert peak_walk.walk_peak(key, chunk_bytes, head) == expected


def test_inexact_bytes_take_the_numpy_product(monkeypatch):
    rng = random.Random(5)
    calls = []
    original = peak_walk._numpy_peak
    monkeypatch.setattr(peak_walk, "_numpy_peak", lambda *a: calls.append(a) or original(*a))
    for key in _shapes(rng, 50):
        chunk_bytes = [rng.uniform(1e8, 1e10) for _ in range(key[2])]
        assert not peak_walk._exact(key, chunk_bytes)
        assert peak_walk.walk_peak(key, chunk_bytes, 0.0) == original(
            peak_walk.alive_counts(*key), chunk_bytes, 0.0)
    assert len(calls) == 50
    assert not peak_walk._exact(("1f1b", 2, 1, 4, 0), [2.0**53])


CASES = [
    ("llama-3.1-70b", 64, 4096, 128, "megatron", {}),
    ("mixtral-8x7b", 32, 4096, 128, "megatron", {}),
    ("llama-3.1-8b", 16, 8192, 64, "torchtitan", {}),
    ("llama-3.1-70b", 32, 8192, 64, "deepspeed", {"offload_activations": True}),
    ("deepseek-v2-lite", 16, 4096, 64, "megatron", {}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{sorted(c[5])}" for c in CASES])
def test_fits_memory_agrees_with_the_full_estimate(case):
    name, gpus, seq, batch, framework, fields = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework, **fields)
    plans = [r for r in (_launchable(p, model, cluster) for p in candidates(base, model, cluster, {}))
             if not isinstance(r, str)]
    verdicts = set()
    for plan in random.Random(2).sample(plans, min(400, len(plans))):
        fits = estimate_memory(model, cluster, plan).fits
        assert fits_memory(model, cluster, plan) == fits
        verdicts.add(fits)
    assert verdicts == {True, False}  # the sample exercises both answers


def test_cached_layout_matches_walking_the_layers():
    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 64)
    base = TrainingPlan(seq_len=4096, global_batch_size=256, framework="megatron")
    kinds = layer_kinds(model)
    for plan in candidates(base, model, cluster, {}):
        resolved = _launchable(plan, model, cluster)
        if isinstance(resolved, str):
            continue
        per_stage = [tuple(tuple(kinds[i] for i in chunk) for c, chunk in enumerate(resolved.chunk_layers)
                           if c % resolved.pp == s) for s in range(resolved.pp)]
        assert [stage_chunk_kinds(model, resolved, s) for s in range(resolved.pp)] == per_stage
        first: dict = {}
        assert stage_signatures(model, resolved) == tuple(
            first.setdefault((cs, s == 0, s == resolved.pp - 1), s) for s, cs in enumerate(per_stage))


SHARED_CASES = [("mixtral-8x7b", 64, 4096, 256, "megatron"), ("deepseek-v2-lite", 16, 4096, 64, "megatron"),
                ("llama-3.1-8b", 16, 8192, 64, "torchtitan"), ("llama-3.1-8b", 16, 4096, 64, "deepspeed")]


def _fresh(fn):
    """`fn()` with every cross-plan memo of the memory and cost models emptied first."""
    states._SHARED.clear()
    states._PLAN_MEMO[:] = [None, None, {}]
    context._GROUPS.clear()
    peak_walk._walk.cache_clear()
    return fn()


@pytest.mark.parametrize("case", SHARED_CASES, ids=[f"{c[0]}-{c[4]}" for c in SHARED_CASES])
def test_memos_shared_across_plans_match_a_fresh_computation(case):
    """Plans sharing a memo (equal but for the fields it declares unread: recompute, batch count,
    expert parallelism, sharding) get what computing each plan alone gives."""
    name, gpus, seq, batch, framework = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework)
    plans = [r for r in (_launchable(p, model, cluster) for p in candidates(base, model, cluster, {}))
             if not isinstance(r, str)]
    for plan in plans:  # warm the shared memos with every plan, in search order
        fits_memory(model, cluster, plan)
    for plan in random.Random(4).sample(plans, min(150, len(plans))):
        warm = [stage_memory(model, plan, s) for s in range(plan.pp)]
        assert warm == _fresh(lambda: [stage_memory(model, plan, s) for s in range(plan.pp)])
        assert context._groups(plan, cluster) == plan_groups(plan, cluster)


@pytest.mark.parametrize("case", SHARED_CASES, ids=[f"{c[0]}-{c[4]}" for c in SHARED_CASES])
def test_shared_dp_and_optimizer_times_match_a_fresh_computation(case):
    """The data-parallel traffic and optimizer step, shared by plans equal but for their batch
    split and recompute (`step.NOT_DP_FIELDS`), are each plan's own; optimizer offload, whose
    copies hide behind the backward, is included (ZeRO-Offload plans of the deepspeed case)."""
    from meshplan.training.estimate import _dp_and_optimizer
    from meshplan.training.time.step import chunk_times

    name, gpus, seq, batch, framework = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework)
    plans = [r for offload in (False, True)
             for r in (_launchable(p, model, cluster) for p in candidates(base, model, cluster, {}, offload))
             if not isinstance(r, str)]

    def times(plan):
        ctx = context.cost_context(model, plan, cluster)
        return _dp_and_optimizer(ctx, chunk_times(ctx))

    for plan in plans:  # warm the shared memo in search order
        times(plan)
    sample = random.Random(9).sample(plans, min(150, len(plans)))
    assert any(p.offload_optimizer for p in plans) or framework != "deepspeed"
    for plan in sample:
        assert times(plan) == _fresh(lambda: times(plan))


def test_peak_candidates_hold_the_first_peak_of_any_order(monkeypatch):
    """Even for orders no schedule makes (a backward first, counts below zero), the candidate
    rows give the numpy walk's answer."""
    rng = random.Random(8)
    for n in range(200):
        vpp = rng.choice([1, 2, 3])
        codes = [rng.choice([0, 1, 2]) + 3 * rng.randrange(vpp) for _ in range(rng.randint(1, 12))]
        key = (f"random-{n}", 1, vpp, 1, 0)
        monkeypatch.setattr(peak_walk, "cached_orders", lambda *a: (tuple(codes),))
        for fn in (peak_walk.alive_counts, peak_walk._order_walk, peak_walk._walk):
            fn.cache_clear()
        chunk_bytes = [float(rng.randrange(0, 100)) for _ in range(vpp)]
        head = rng.choice([0.0, 7.0])
        expected = peak_walk._numpy_peak(peak_walk.alive_counts(*key), chunk_bytes, head)
        assert peak_walk.walk_peak(key, chunk_bytes, head) == expected
    for fn in (peak_walk.alive_counts, peak_walk._order_walk, peak_walk._walk):
        fn.cache_clear()
