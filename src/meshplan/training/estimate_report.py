"""A StepEstimate as a plain dict (`train estimate --json`) and as a Chrome trace."""

from __future__ import annotations

from typing import Any

from meshplan.training.estimate import StepEstimate
from meshplan.training.memory.report import memory_dict


def estimate_dict(est: StepEstimate) -> dict[str, Any]:
    """Everything `train estimate --json` prints (seconds, bytes, fractions)."""
    mem = memory_dict(est.memory)
    return {
        "step_time_s": est.step_time_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "mfu": est.mfu,
        "hfu": est.hfu,
        "flops_formula": "model FLOPs = 3 x causal forward FLOPs per token (matmuls + attention "
                         "with causal halving) x tokens; dense bf16 peak (fp8 plans too)",
        "breakdown": est.breakdown,
        "bubble_fraction": est.bubble_fraction,
        "trainable_params": mem["trainable_params"],
        "imbalance": est.imbalance,
        "peak_bytes": mem["peak_bytes"],
        "fits": mem["fits"],
        "memory": mem,
        "plan": mem["plan"],
        "chosen": mem["chosen"],
        "warnings": mem["warnings"],
    }


def trace_extras(est: StepEstimate) -> list[tuple[int, str, str, float, float]]:
    """Communication events on their own streams: exposed TP comm at the end of each compute op
    and the exposed data-parallel reduction after the pipeline."""
    pp = est.plan.pp
    out = []
    for e in est.pipeline.events:
        if e.kind not in ("F", "B"):
            continue
        chunk = est.chunks[e.chunk * pp + e.stage]
        tp = chunk.tp_exposed_s / 3 * (1 if e.kind == "F" else 2)
        if tp > 0:
            out.append((e.stage, "tp comm", f"tp {e.kind} mb{e.microbatch}", e.end_s - tp, e.end_s))
    end = est.pipeline.step_time_s
    dp = est.breakdown.get("dp_comm_exposed", 0.0)
    for stage in range(pp):
        if dp > 0:
            out.append((stage, "dp comm", "gradient reduction", end, end + dp))
    return out
