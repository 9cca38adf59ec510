"""The search's enumeration and per-plan caches give what the plain computation gives:

- `cached_problems` keys on every field its answer reads: a recording proxy shows `problems`
  reads no plan field outside PROBLEM_FIELDS, for every framework and a spread of resolved plans
  (launchable and not, with offload tiers), and the cached answer equals a fresh one;
- `candidates`, which filters layouts before pairing them with the other axes, yields the plans
  (fields and fields set) of one filtered product over every axis, in its order.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.layout.capabilities import (CAPABILITIES, PROBLEM_FIELDS, cached_problems,
                                                   problems)
from meshplan.training.layout.resolve import resolve_plan
from meshplan.training.search.plans import candidates


class Recording:
    """A resolved plan that notes each field read."""

    def __init__(self, plan):
        object.__setattr__(self, "_plan", plan)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._plan, name)


def _resolved(framework: str, model, gpus: int):
    cluster = Cluster.build("h100-sxm-80gb", gpus)
    out = []
    for offload in (False, True):
        base = TrainingPlan(seq_len=4096, global_batch_size=64, framework=framework)
        for plan in candidates(base, load_model(model), cluster, {}, offload=offload):
            try:
                out.append(resolve_plan(plan, load_model(model), cluster))
            except Exception:
                continue
    return out


@pytest.mark.parametrize("framework", sorted(CAPABILITIES))
def test_problems_read_only_the_cached_fields(framework):
    model = load_model("mixtral-8x7b")
    plans = _resolved(framework, "mixtral-8x7b", 8)
    rng = random.Random(1)
    for plan in rng.sample(plans, min(150, len(plans))):
        # vary fields the search does not, so rarely taken branches are read too
        plan = dataclasses.replace(plan, tp_comm_overlap=rng.random() < 0.5,
                                   sequence_parallel=rng.random() < 0.5,
                                   shard_group=rng.choice([plan.shard_group, 1]))
        proxy = Recording(plan)
        assert problems(framework, proxy, model) == problems(framework, plan, model)
        assert proxy.read <= set(PROBLEM_FIELDS), proxy.read - set(PROBLEM_FIELDS)
        assert cached_problems(framework, plan, model) == problems(framework, plan, model)


def _every_combination(base, model, cluster, pinned, offload):
    """The enumeration `candidates` replaced: one product over every axis, filtered plan by plan."""
    from meshplan.training.layout.capabilities import GENERIC, capability
    from meshplan.training.search.plans import _axes, _offload_tier

    cap = capability(base.framework) or GENERIC
    axes = _axes(base, model, cluster, pinned, cap, offload)
    for values in itertools.product(*axes.values()):
        f = dict(zip(axes, values))
        chunks = f["pp"] * f["vpp"]
        if cluster.num_gpus % (f["tp"] * f["pp"] * f["cp"]) or (f["vpp"] > 1 and f["pp"] == 1) \
                or chunks > model.num_layers \
                or (f["etp"] is not None and (f["etp"] >= f["tp"] or f["ep"] == 1)) \
                or (f["schedule"] == "zero-bubble" and (f["pp"] == 1 or f["vpp"] > 1)) \
                or (f["offload_optimizer"] and f["dp_sharding"] == "optimizer") \
                or (offload and not _offload_tier(f, cap)):
            continue
        plan = base.model_copy(update={**f, "dp": None, "pipeline_split": None})
        yield plan
        if cap.partial_recompute and f["recompute"] == "full" and model.num_layers // chunks >= 2:
            yield plan.model_copy(update={"recompute_num_layers": model.num_layers // chunks // 2})


@pytest.mark.parametrize("case", [("mixtral-8x7b", 64, "megatron", {}), ("llama-3.1-8b", 16, "torchtitan", {}),
                                  ("qwen3-30b-a3b", 32, "deepspeed", {}),
                                  ("llama-3.1-8b", 16, "megatron", {"schedule": "zero-bubble"})])
def test_layout_first_enumeration_keeps_every_plan_and_its_order(case):
    name, gpus, framework, pinned = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=4096, global_batch_size=256, framework=framework)
    for offload in (False, True):
        new = [(p.__dict__, p.model_fields_set) for p in candidates(base, model, cluster, pinned, offload)]
        old = [(p.__dict__, p.model_fields_set) for p in _every_combination(base, model, cluster, pinned, offload)]
        assert new == old
        assert new or offload


def test_chunk_times_from_shared_sums_match_a_fresh_computation():
    """Chunk times built from sums shared by plans with the same layer times (`_chunk_sums`)
    equal those of each plan costed alone."""
    from meshplan.training.time import step
    from meshplan.training.time.context import cost_context
    from meshplan.training.search.sweep import launchable as _launchable

    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 64)
    base = TrainingPlan(seq_len=4096, global_batch_size=256, framework="megatron")
    plans = [r for r in (_launchable(p, model, cluster) for p in candidates(base, model, cluster, {}))
             if not isinstance(r, str)]
    for plan in plans:
        step.chunk_times(cost_context(model, plan, cluster))
    for plan in random.Random(6).sample(plans, 80):
        warm = step.chunk_times(cost_context(model, plan, cluster))
        step._LAYER_TIMES.clear()
        assert step.chunk_times(cost_context(model, plan, cluster)) == warm


@pytest.mark.parametrize("case", [("llama-3.1-405b", 16384, 8192, 2048, "megatron"),
                                  ("mixtral-8x7b", 64, 4096, 256, "megatron"),
                                  ("llama-3.1-8b", 24, 4096, 96, "torchtitan"),
                                  ("llama-3.1-8b", 16, 4096, 64, "deepspeed")])
def test_batch_splits_the_sweep_refuses_early_are_refused_by_resolve(case):
    """The sweep's quick batch test (`batch_split_refused`) flags only plans `resolve_plan`
    refuses, and it flags most of those `resolve_plan` refuses for their batch split."""
    from meshplan.errors import ConfigError
    from meshplan.training.search.plans import candidate_updates
    from meshplan.training.search.sweep import batch_refused as _batch_refused

    name, gpus, seq, batch, framework = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus, gpus_per_node=8)
    base = TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework)
    flagged = refused = 0
    for update in candidate_updates(base, model, cluster, {}):
        try:
            resolve_plan(base.model_copy(update=update), model, cluster)
            ok = True
        except ConfigError as exc:
            ok = False
            refused += "micro-batch" in str(exc) or "multiple of" in str(exc)
        if _batch_refused(base, update, gpus):
            flagged += 1
            assert not ok, update
    assert flagged and flagged >= refused * 0.9


@pytest.mark.parametrize("framework,method", [("megatron", "full"), ("torchtitan", "full"), ("deepspeed", "full"),
                                              ("hf", "lora"), ("hf", "qlora")])
def test_the_sweeps_plain_fields_resolve_as_the_pydantic_plan_does(framework, method):
    """The sweep hands `resolve_plan` a candidate's fields as plain attributes (`PlanFields`)
    instead of a pydantic copy: the resolved plan, or the refusal, is the same."""
    from meshplan.errors import ConfigError
    from meshplan.training.search.plans import candidate_updates
    from meshplan.training.search.sweep import PlanFields as _PlanFields

    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 16)
    base = TrainingPlan(seq_len=4096, global_batch_size=64, framework=framework, method=method)

    def resolved(plan):
        try:
            return resolve_plan(plan, model, cluster)
        except ConfigError as exc:
            return str(exc)

    updates = [u for offload in (False, True) for u in candidate_updates(base, model, cluster, {}, offload)]
    for update in random.Random(3).sample(updates, min(300, len(updates))):
        assert resolved(_PlanFields(dict(base), update)) == resolved(base.model_copy(update=update))
