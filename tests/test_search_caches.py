"""`cached_problems` keys on every field its answer reads: a recording proxy shows `problems`
reads no plan field outside PROBLEM_FIELDS, for every framework and a spread of resolved plans
(launchable and not, with offload tiers), and the cached answer equals a fresh one."""

from __future__ import annotations

import dataclasses
import random

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.capabilities import CAPABILITIES, PROBLEM_FIELDS, cached_problems, problems
from meshplan.training.resolve import resolve_plan
from meshplan.training.search import candidates


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
