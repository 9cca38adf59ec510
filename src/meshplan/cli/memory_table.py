"""The `train memory` table: one row per pipeline stage whose printed parts add up to its printed
total, and a stated line when the largest value of each column comes from different stages (the
peak is one stage's total, not the sum of per-column maxima; #34 item 5)."""

from __future__ import annotations

import math

GIB = 2**30
STEP = 0.1
"""GiB per printed digit (one decimal)."""

PARTS = (("weights", "weights_bytes"), ("grads", "gradients_bytes"),
         ("optim", "optimizer_state_bytes"), ("activ.", "activations_bytes"),
         ("logits", "logits_bytes"), ("other", "other_bytes"))
"""Printed parts of a stage; `optim` is the master weights plus the optimizer's moments, `other`
the communication buffers, workspaces, allocator fragmentation and CUDA context."""


def stage_parts(stage) -> dict[str, float]:
    """A stage's printed parts in bytes (they add up to its total_bytes)."""
    data = stage.to_dict()
    data["optimizer_state_bytes"] = stage.master_weights_bytes + stage.optimizer_bytes
    return {name: data[key] for name, key in PARTS}


def rounded_cells(parts: dict[str, float], total: float) -> list[str]:
    """The parts and the total in GiB with one decimal, the parts rounded so that they add up to
    the rounded total (largest remainder: each part moves by less than one digit)."""
    units = round(total / GIB / STEP)
    exact = {name: value / GIB / STEP for name, value in parts.items()}
    cells = {name: math.floor(value) for name, value in exact.items()}
    order = sorted(exact, key=lambda name: exact[name] - cells[name], reverse=True)
    for name in order[:units - sum(cells.values())]:  # never negative: floors sum to <= units
        cells[name] += 1
    return [f"{cells[name] * STEP:.1f}" for name in parts] + [f"{units * STEP:.1f}"]


def maxima_note(stages) -> str | None:
    """When the per-column maxima come from different stages, the line saying that the peak is one
    stage's total and what the maxima would add up to (None when one stage holds every maximum)."""
    if len(stages) < 2:
        return None
    parts = [stage_parts(s) for s in stages]
    top = max(range(len(stages)), key=lambda i: stages[i].total_bytes)
    peak = stages[top]
    tops = {name: max(range(len(stages)), key=lambda i: parts[i][name]) for name, _ in PARTS}
    summed = sum(parts[i][name] for name, i in tops.items())
    extra = summed - peak.total_bytes
    if extra < STEP * GIB / 2:
        return None
    elsewhere = [f"{name} on stage {stages[i].stage}" for name, i in tops.items()
                 if parts[i][name] > parts[top][name] + STEP * GIB / 2]
    return (f"  peak is one stage's total, not the sum of per-column maxima ({summed / GIB:.1f} GiB, "
            f"+{extra / GIB:.1f}): stages peak in different parts ({', '.join(elsewhere)} "
            f"larger than on stage {peak.stage})")
