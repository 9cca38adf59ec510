"""Where each parallel group of a plan sits on the cluster (TP, CP, EP, DP, PP neighbours)."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.costs.placement import GroupPlacement, group_placement
from meshplan.hardware import Cluster
from meshplan.training.layout.resolve import ResolvedPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanGroups:
    """Placements of the communication groups of one plan."""

    tp: GroupPlacement
    cp: GroupPlacement
    ep: GroupPlacement
    dp: GroupPlacement
    """The gradient-reduction group of dense weights: cp x dp ranks (ep splits dp)."""
    shard: GroupPlacement
    """The group model states are sharded over (dp x cp, or the hybrid shard size)."""
    pp_cross_node: bool
    """Whether neighbouring pipeline stages sit in different scale-up (NVLink) domains."""


def _sizes(plan: ResolvedPlan, world: int) -> tuple[dict[str, int], str]:
    """Rank-order sizes; ep splits dp when it divides it, else ep spans consecutive ranks."""
    ep = plan.ep if plan.dp % plan.ep == 0 else 1
    sizes = {"tp": plan.tp, "cp": plan.cp, "ep": ep, "dp": plan.dp // ep, "pp": plan.pp}
    return sizes, plan.rank_order


def plan_groups(plan: ResolvedPlan, cluster: Cluster) -> PlanGroups:
    """Place every group of `plan` on `cluster`."""
    sizes, order = _sizes(plan, cluster.num_gpus)

    def place(*members: str) -> GroupPlacement:
        return group_placement(sizes, order, members, cluster)

    if sizes["ep"] == plan.ep:
        ep = place("ep")
    else:  # expert groups over consecutive ranks (etp < tp borrows tensor-parallel ranks)
        ep = group_placement({"ep": plan.ep, "rest": cluster.num_gpus // plan.ep}, "ep-rest",
                             ("ep",), cluster)
    dp = place("cp", "ep", "dp")  # context-parallel ranks hold the same weights too
    shard = dp
    if plan.shard_group != plan.dp * plan.cp:  # hybrid: shard over the nearest ranks only
        rest = cluster.num_gpus // (plan.tp * plan.shard_group)
        shard = group_placement({"tp": plan.tp, "shard": plan.shard_group, "rest": rest},
                                "tp-shard-rest", ("shard",), cluster)
    pp = place("pp")
    return PlanGroups(tp=place("tp"), cp=place("cp"), ep=ep, dp=dp, shard=shard,
                      pp_cross_node=pp.domains > 1)
