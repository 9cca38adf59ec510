"""The imbalance figures a step estimate reports: document attention work over ranks and MoE
routed tokens over experts and EP ranks (see imbalance/packing.py and imbalance/routing.py)."""

from __future__ import annotations

from meshplan.model.spec import ModelSpec, MoEMLP
from meshplan.training.imbalance.packing import doc_imbalance
from meshplan.training.layout.resolve import ResolvedPlan
from meshplan.training.imbalance.routing import routing_load


def imbalance_report(model: ModelSpec, plan: ResolvedPlan) -> dict[str, dict]:
    """`attention` (with doc_lengths) and `moe` (with expert_skew) imbalance of `plan`; empty
    for today's defaults."""
    out: dict[str, dict] = {}
    docs = doc_imbalance(plan)
    if docs is not None:
        out["attention"] = {"doc_lengths": plan.doc_lengths, "balance": plan.balance,
                            **docs.to_dict()}
    moe = next((layer.mlp for layer in model.layers if isinstance(layer.mlp, MoEMLP)), None)
    if plan.expert_skew is not None and moe is not None:
        load = routing_load(plan.expert_skew, moe.num_experts, plan.ep, plan.moe_balance)
        raw = routing_load(plan.expert_skew, moe.num_experts, plan.ep, "none")
        out["moe"] = {"expert_skew": plan.expert_skew, "moe_balance": plan.moe_balance,
                      **load.to_dict(), "unbalanced_busiest_ep_rank_load": raw.busiest_rank}
    return out
