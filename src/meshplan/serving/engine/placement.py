"""Where a serving deployment runs: its engine instances on hosts (nodes) and host-local GPUs.

The rule the plan search, `serve simulate` and the launch-script exporters share:

- a deployment of N GPUs either fits in one node (N <= gpus_per_node) or takes whole nodes
  (N a multiple of gpus_per_node), as a cluster of several nodes is rented and wired whole;
- an engine instance (a replica, or one prefill/decode instance) of g GPUs either sits inside
  one node (g divides gpus_per_node, so instances pack without straddling a node) or spans
  whole nodes (g a multiple of gpus_per_node: a multi-node engine, one rank group per node).

Within one node instances take consecutive GPUs in order (prefill pool first); across nodes
the widest instances are placed first, each on the lowest free GPUs that hold it.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.serving.plan import ServingPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    """One engine instance placed on hosts."""

    role: str
    """"server" (colocated prefill and decode), "prefill" or "decode"."""
    index: int
    """Position among the instances of its role, from 0."""
    tp: int
    """Tensor-parallel size of the instance."""
    width: int
    """GPUs of the instance (tp x pp x dp)."""
    node: int
    """The (first) node it runs on, from 0."""
    nodes: int
    """Nodes it spans (1 unless width > gpus_per_node)."""
    gpus: tuple[int, ...]
    """Host-local GPU indices on each of its nodes (CUDA_VISIBLE_DEVICES)."""


def engine_pools(plan: ServingPlan) -> list[tuple[str, int, int, int]]:
    """(role, instances, tp, GPUs per instance) of each pool the plan deploys."""
    dis = plan.disaggregated
    if dis is None:
        return [("server", plan.replicas, plan.tp, plan.gpus_per_replica)]
    pools = []
    for role, gpus, tp in (("prefill", dis.prefill_gpus, dis.prefill_tp), ("decode", dis.decode_gpus, dis.decode_tp)):
        if gpus is None:
            continue
        width = tp * plan.pp  # as the simulator sizes pool instances (meshplan.serving.engine.deployment)
        if gpus % width:
            raise ConfigError(f"disaggregated.{role}_gpus={gpus} is not a multiple of {role}_tp x pp = "
                              f"{tp} x {plan.pp}")
        pools.append((role, gpus // width, tp, width))
    return pools


def placement_error(plan: ServingPlan, gpus_per_node: int) -> str | None:
    """Why `plan` cannot be placed on nodes of `gpus_per_node` GPUs (None: it can)."""
    n, gpn = plan.num_gpus, gpus_per_node
    if n > gpn and n % gpn:
        nodes = -(-n // gpn)
        return (f"the deployment's {n} GPUs span {nodes} nodes of {gpn} but are not a multiple of "
                f"{gpn}: a deployment fits in one node (<= {gpn} GPUs) or takes whole nodes "
                f"({nodes * gpn} GPUs, or {(nodes - 1) * gpn or gpn})")
    for role, _, tp, width in engine_pools(plan):
        if gpn % width and width % gpn:
            return (f"a {role} instance of {width} GPUs (tp {tp}, pp {plan.pp}, dp {plan.dp}) would straddle "
                    f"nodes of {gpn} GPUs: an instance divides a node or spans whole nodes")
    return None


def check_placement(plan: ServingPlan, gpus_per_node: int) -> None:
    """Raise a ConfigError naming every factor when `plan` cannot be placed on whole hosts."""
    error = placement_error(plan, gpus_per_node)
    if error:
        raise ConfigError(f"plan of {plan.num_gpus} GPUs on nodes of {gpus_per_node}: {error}")


def fits(plan: ServingPlan, gpus_per_node: int) -> bool:
    """Whether `plan` follows the placement rule."""
    return placement_error(plan, gpus_per_node) is None


def nodes_used(plan: ServingPlan, gpus_per_node: int) -> int:
    """Nodes the deployment occupies."""
    return -(-plan.num_gpus // gpus_per_node)


def place(plan: ServingPlan, gpus_per_node: int) -> list[Slot]:
    """Every engine instance of `plan` on nodes of `gpus_per_node` GPUs, in pool order."""
    check_placement(plan, gpus_per_node)
    wanted = [(role, i, tp, width) for role, count, tp, width in engine_pools(plan) for i in range(count)]
    if plan.num_gpus <= gpus_per_node:  # one host: consecutive GPUs in pool order
        out, gpu = [], 0
        for role, i, tp, width in wanted:
            out.append(Slot(role=role, index=i, tp=tp, width=width, node=0, nodes=1,
                            gpus=tuple(range(gpu, gpu + width))))
            gpu += width
        return out
    free = [0] * nodes_used(plan, gpus_per_node)  # GPUs taken on each node, from index 0
    placed: dict[tuple[str, int], Slot] = {}
    for role, i, tp, width in sorted(wanted, key=lambda w: -w[3]):  # widest first: no gaps
        if width >= gpus_per_node:
            span = width // gpus_per_node
            node = next(k for k in range(len(free)) if all(f == 0 for f in free[k:k + span]))
            free[node:node + span] = [gpus_per_node] * span
            gpus = tuple(range(gpus_per_node))
        else:
            node = next(k for k, f in enumerate(free) if f + width <= gpus_per_node)
            gpus, free[node] = tuple(range(free[node], free[node] + width)), free[node] + width
            span = 1
        placed[(role, i)] = Slot(role=role, index=i, tp=tp, width=width, node=node, nodes=span, gpus=gpus)
    return [placed[(role, i)] for role, i, _, _ in wanted]
