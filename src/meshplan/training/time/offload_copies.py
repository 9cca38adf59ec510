"""Host<->GPU copies inside the forward and backward passes of offloaded plans: what of them the
layers' compute does not hide.

- Activation offload (DeepSpeed `cpu_checkpointing`; MEMO, arXiv 2407.02992; SSDTrain, arXiv
  2408.10013): each layer's saved tensors go GPU->host during its forward and come back
  host->GPU for its backward, on a copy stream beside the compute.
- Parameter offload (ZeRO-Infinity, arXiv 2104.07857, section 6 "bandwidth-centric
  partitioning" and overlap-centric prefetching; DeepSpeed `offload_param`): each GPU fetches its
  shard of a layer's 16-bit parameters over its own host link (from host memory, or from the
  node's NVMe through host memory at the GPU's share of the drives) before the layer's forward
  and again before its backward; the all-gather that follows is the FSDP traffic already costed.

A copy is prefetched while the neighbouring layer computes, so per layer and pass only
max(0, copy - compute) is exposed. Copies of the two directions run at once (the link is full
duplex); those of one direction queue behind each other.
"""

from __future__ import annotations

from meshplan.training.time.context import CostContext
from meshplan.training.memory.total import saved_layer_bytes
from meshplan.training.time.offload import host_link_bytes_per_s, nvme_share
from meshplan.training.memory.states import layer_split


def param_fetch_bytes_per_s(ctx: CostContext) -> float:
    """Rate one GPU's parameter fetches reach: its host link, and with the parameters on NVMe
    also its share of the node's drives."""
    link = host_link_bytes_per_s(ctx.cluster)
    if ctx.plan.offload_target == "nvme":
        return min(link, nvme_share(ctx.cluster)[0])
    return link


def param_store_bytes_per_s(ctx: CostContext) -> float:
    """Rate one GPU writes its updated parameter shard back to the tier it lives in (when the
    optimizer runs on the GPU): its host link, and for NVMe also its share of the drives."""
    link = host_link_bytes_per_s(ctx.cluster)
    if ctx.plan.offload_target == "nvme":
        return min(link, nvme_share(ctx.cluster)[1])
    return link


def layer_copies(ctx: CostContext, chunk: tuple[int, ...]) -> list[tuple[float, float]]:
    """Per layer of `chunk`: (activation copy seconds one way, parameter fetch seconds) for one
    micro-batch on one GPU."""
    p, model = ctx.plan, ctx.model
    saved = saved_layer_bytes(model, p, chunk) if p.offload_activations else [0.0] * len(chunk)
    link = host_link_bytes_per_s(ctx.cluster)
    fetch_rate = param_fetch_bytes_per_s(ctx)
    out = []
    for i, acts in zip(chunk, saved):
        fetch = 0.0
        if p.offload_params:
            dense, expert = layer_split(model, i, p)
            fetch = (dense / p.shard_group + expert / p.expert_dp) * ctx.act_width / fetch_rate
        out.append((acts / link, fetch))
    return out


def chunk_offload_exposed(ctx: CostContext, chunk: tuple[int, ...], forward: list[float],
                          backward: list[float]) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch the chunk's offload copies add, given each
    layer's forward and backward compute (`forward`, `backward`). Forward: the activations go out
    while the parameters come in; backward: parameters and activations both come in."""
    p = ctx.plan
    if not (p.offload_activations or p.offload_params):
        return 0.0, 0.0
    fwd = bwd = 0.0
    for (acts, fetch), f, b in zip(layer_copies(ctx, chunk), forward, backward):
        fwd += max(0.0, max(acts, fetch) - f)
        bwd += max(0.0, acts + fetch - b)
    return fwd, bwd
