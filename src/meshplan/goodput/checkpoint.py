"""Checkpoints of a training plan: the state a distributed checkpoint writes (from the memory
model's bytes per parameter), how long writing, reading and the device-to-host copy take, and the
Young/Daly interval that balances checkpoint cost against the work a failure loses."""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.goodput.options import Resilience
from meshplan.training.finetune import adapters as finetune
from meshplan.training.memory.states import state_bytes


def checkpoint_bytes(model: ModelSpec, plan) -> float:
    """Bytes of one checkpoint: each trained parameter's weights, master copy and optimizer
    states once. A distributed checkpoint (torch.distributed.checkpoint, Megatron's
    dist_checkpointing) writes replicated shards once, so sharding changes who writes, not how
    much; gradients are not saved, and a LoRA run saves its adapters only."""
    per = state_bytes(plan, model.hidden_size)
    trained = (finetune.trainable_params(model, plan) if finetune.is_finetune(plan)
               else model.params_total)
    return trained * (per.weights + per.master + per.optimizer)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointCost:
    """Sizes and times of one checkpoint of a plan on a cluster."""

    total_bytes: float
    bytes_per_rank: float
    """The share each GPU writes (the writes are spread over every rank)."""
    write_s: float
    read_s: float
    copy_s: float
    """Device-to-host copy of a rank's share over its host link (what async pays)."""
    stall_s: float
    """What the training step pays per checkpoint: write_s (sync) or copy_s (async)."""


def checkpoint_cost(total_bytes: float, cluster: Cluster, options: Resilience) -> CheckpointCost:
    """The CheckpointCost of `total_bytes` of state on `cluster` with `options`' storage."""
    per_rank = total_bytes / cluster.num_gpus
    write = total_bytes / options.checkpoint_write_bytes_per_s
    copy = per_rank / cluster.host_link_bandwidth_bytes_per_s_per_gpu
    return CheckpointCost(total_bytes=total_bytes, bytes_per_rank=per_rank, write_s=write,
                          read_s=total_bytes / options.checkpoint_read_bytes_per_s, copy_s=copy,
                          stall_s=write if options.checkpoint_mode == "sync" else copy)


def young_daly_interval_s(stall_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval sqrt(2 x cost x MTBF) (Young 1974; Daly 2006's first
    order term), seconds of training between checkpoints."""
    if not math.isfinite(mtbf_s):
        return math.inf
    return math.sqrt(2.0 * stall_s * mtbf_s)


def interval_s(cost: CheckpointCost, mtbf_s: float, options: Resilience) -> float:
    """The interval in use: the given one, or Young/Daly's; an async write must end before the
    next one starts, so the interval is at least the write time."""
    chosen = options.checkpoint_interval_s
    if chosen is None:
        chosen = young_daly_interval_s(cost.stall_s, mtbf_s)
    return max(chosen, cost.write_s) if options.checkpoint_mode == "async" else chosen
