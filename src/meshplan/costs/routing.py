"""Which experts a batch of routed tokens touches: shared by the training and serving cost models.

A batch of T tokens, each choosing top-k of E experts, reads the weights of only the experts some
token reaches. At T k >> E that is all of them; at decode batch 1 it is k of them, and a MoE
model then streams its active parameters, not its total ones.
"""

from __future__ import annotations


def distinct_experts(tokens: float, top_k: int, experts: int) -> float:
    """Expected number of distinct experts `tokens` tokens reach when each picks `top_k` of
    `experts` without replacement, routing uniform and independent across tokens: an expert is
    missed by one token with probability 1 - k/E, so E (1 - (1 - k/E)^t) (not t k: a batch
    reuses experts; all E once t k >> E)."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)
