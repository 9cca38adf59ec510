"""Which ranked plans the model cannot tell from the winner, and what measurement would.

Two layouts of one model on one cluster share most of their error (same kernels, same GPU), so
their order is surer than either number: the tie gap (meshplan.bands.tie_gap) is the median
difference between the residuals of two published layouts of the same model, GPU and GPU count
from one source. A plan whose score is within that gap of the winner's is a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.bands import tie_gap

MEASUREMENTS = {
    "compute": "a GEMM and attention benchmark at both plans' layer shapes (micro-batch, TP size, "
               "recompute)",
    "tp_comm_exposed": "an all-reduce / reduce-scatter sweep over the tensor-parallel group at the "
                       "activation size (nccl-tests)",
    "pipeline_bubble": "one profiled step of each: the bubble is the schedule's idle time",
    "dp_comm_exposed": "a reduce-scatter / all-reduce sweep over the data-parallel group at the "
                       "gradient bucket size (nccl-tests)",
    "ep_comm": "an all-to-all sweep over the expert-parallel group at the dispatch size",
    "cp_comm_exposed": "a point-to-point exchange over the context-parallel ring",
    "fsdp_gather_exposed": "an all-gather sweep over the sharding group at one layer's parameters",
    "optimizer": "the optimizer step alone",
    "offload_copies_exposed": "pinned host-device copy bandwidth under load",
    "cpu_offload": "the CPU optimizer step alone",
}
"""Breakdown part -> the measurement that prices it."""
FALLBACK = "one profiled step of each"


@dataclass(frozen=True, slots=True)
class Ties:
    """Ranks (1-based) tied with the winner, the gap used, and what would separate them."""

    ranks: tuple[int, ...]
    gap: float
    part: str = ""
    """The step-time part where the tied plans differ most from the winner."""
    measurement: str = ""

    def to_dict(self) -> dict:
        return {"plans": list(self.ranks), "gap": self.gap, "separate_by": self.part or None,
                "measurement": self.measurement or None}

    def line(self) -> str:
        """The sentence under the ranking ('' without ties)."""
        if not self.ranks:
            return ""
        plans = ", ".join(str(r) for r in self.ranks)
        return (f"plan{'s' if len(self.ranks) > 1 else ''} {plans} tie with the winner (within "
                f"{self.gap:.1%}, the median error of ordering two published layouts); they differ "
                f"most in {self.part.replace('_', ' ')}: to separate them, measure {self.measurement}")


def ties(ranked, scores) -> Ties:
    """The plans of `ranked` (with their `scores`, lower is better) tied with the first."""
    gap = tie_gap()
    if len(ranked) < 2 or not scores[0]:
        return Ties((), gap)
    tied = [i for i in range(1, len(ranked))
            if scores[i] / scores[0] > 0 and abs(math.log(scores[i] / scores[0])) < gap]
    if not tied:
        return Ties((), gap)
    part = _widest_part(ranked[0], [ranked[i] for i in tied])
    return Ties(tuple(i + 1 for i in tied), gap, part, MEASUREMENTS.get(part, FALLBACK))


def _widest_part(winner, others) -> str:
    """The breakdown part whose share of the step differs most between the winner and the others."""
    def share(est, key):
        return est.breakdown.get(key, 0.0) / est.step_time_s

    return max(winner.breakdown, key=lambda k: sum(abs(share(o, k) - share(winner, k)) for o in others))
