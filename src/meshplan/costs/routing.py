"""Which experts a batch of routed tokens touches: shared by the training and serving cost models.

A batch of T tokens, each choosing top-k of E experts, reads the weights of only the experts some
token reaches. At T k >> E that is all of them; at decode batch 1 it is k of them, and a MoE
model then streams its active parameters, not its total ones. The same count over nodes (or
NVLink domains, or GPUs) is how many copies of a token a deduplicating dispatcher sends:
DeepEP's normal kernels cross the network once per destination node (training's flex dispatcher,
serving's SGLang prefill), optionally under DeepSeek's node-limited routing (`touched_units`).
"""

from __future__ import annotations

from meshplan.model.spec import MoEMLP


def distinct_experts(tokens: float, top_k: int, experts: int) -> float:
    """Expected number of distinct experts `tokens` tokens reach when each picks `top_k` of
    `experts` without replacement, routing uniform and independent across tokens: an expert is
    missed by one token with probability 1 - k/E, so E (1 - (1 - k/E)^t) (not t k: a batch
    reuses experts; all E once t k >> E)."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def touched_share(groups: float, top_k: int, experts: int) -> float:
    """Expected number of `groups` equal groups of experts that one token's top-k choice
    reaches (uniform routing): groups x (1 - P(a given group holds none of the k))."""
    if groups <= 1:
        return min(groups, 1.0)
    per_group = experts / groups
    miss = 1.0
    for j in range(min(top_k, experts)):
        miss *= max(0.0, (experts - per_group - j) / (experts - j))
    return groups * (1.0 - miss)


def touched_units(mlp: MoEMLP, units: float) -> float:
    """Expected `units` (nodes or NVLink domains, each holding an equal slice of the experts)
    one token's experts reach. Group-limited routing (n_group, topk_group) first picks
    topk_group of the n_group expert groups, then the top-k experts inside them: with whole
    groups per unit a token reaches at most topk_group units (DeepSeek-V3: 4 of 8 nodes, its
    report's node-limited routing); with groups spread over several units, its top-k land on
    the units of the chosen groups only."""
    groups, limit = mlp.n_group, mlp.topk_group
    if groups <= 1 or limit >= groups:
        return touched_share(units, mlp.top_k, mlp.num_experts)
    if units <= groups:
        return touched_share(units, limit, groups)
    return touched_share(units * limit / groups, mlp.top_k, mlp.num_experts * limit / groups)
