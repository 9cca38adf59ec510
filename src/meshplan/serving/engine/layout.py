"""A parallel layout for a deployment that states only its GPU count.

Rule (one, stated, tested): the smallest tensor-parallel size that serves the workload, with
replicas filling the GPUs. TP sizes are tried in powers of two within one node (1, 2, 4, 8 on
8-GPU nodes), then whole nodes with pipeline stages across nodes; a size "serves" when the
weights fit beside the engine's KV cache and that cache holds the longest request. Fewer GPUs
per replica leaves more replicas, and replicas scale throughput with no communication. It is
also vLLM's documented strategy (docs.vllm.ai, "Distributed inference and serving": one GPU if
the model fits; tensor parallelism over the GPUs of one node if it fits a node; tensor
parallelism within nodes and pipeline parallelism across nodes otherwise), applied here to
every engine, since none of them documents a per-model table.
"""

from __future__ import annotations

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.serving.engine.deployment import resolve_pools
from meshplan.serving.engine.placement import fits
from meshplan.serving.plan import ServingPlan
from meshplan.serving.traffic.workload import Workload

RULE = "smallest TP (then PP across nodes) whose replica fits the model and the longest request, replicas filling the GPUs"


def candidates(num_gpus: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """(tp, pp) in the order tried: powers of two up to a node, then pp over whole nodes."""
    out, tp = [], 1
    while tp <= min(num_gpus, gpus_per_node):
        if num_gpus % tp == 0:
            out.append((tp, 1))
        tp *= 2
    pp = 2
    while gpus_per_node * pp <= num_gpus:
        if num_gpus % (gpus_per_node * pp) == 0:
            out.append((gpus_per_node, pp))
        pp *= 2
    return out


def _serves(model: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload) -> bool:
    """Whether `plan`'s replicas hold the weights and the longest request's KV cache."""
    if not fits(plan, cluster.gpus_per_node):
        return False
    try:
        pools = resolve_pools(model, cluster, plan, workload)
    except ConfigError:
        return False
    longest = max((r.input_len + r.output_len for r in workload.requests), default=0)
    return all(p.memory.kv_tokens >= longest for p in pools)


def choose_layout(model: ModelSpec, cluster: Cluster, plan: ServingPlan,
                  workload: Workload) -> tuple[ServingPlan, str]:
    """`plan` with the layout of RULE on all of `cluster`'s GPUs, and a note saying which.
    When no layout serves, the largest one tried is returned (its simulation then names what
    does not fit), so a missing layout is never the reason a run fails."""
    tried = candidates(cluster.num_gpus, cluster.gpus_per_node) or [(1, 1)]
    for tp, pp in tried:
        trial = plan.model_copy(update={"tp": tp, "pp": pp, "dp": 1, "replicas": cluster.num_gpus // (tp * pp)})
        if _serves(model, cluster, trial, workload):
            return trial, _note(trial, cluster.num_gpus, "")
    tp, pp = tried[-1]
    trial = plan.model_copy(update={"tp": tp, "pp": pp, "dp": 1, "replicas": cluster.num_gpus // (tp * pp)})
    return trial, _note(trial, cluster.num_gpus, "; no layout fits, so the largest was kept")


def _note(plan: ServingPlan, num_gpus: int, tail: str) -> str:
    return (f"no layout given for {num_gpus} GPUs: chose tp={plan.tp} pp={plan.pp} x {plan.replicas} "
            f"replica{'s' if plan.replicas != 1 else ''} ({RULE}){tail}")
