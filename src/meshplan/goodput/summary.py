"""Goodput of a training run: how much of the wall clock trains, and where the rest goes.

With unexpected interruptions at rate lu and planned ones at rate lp (per second of wall clock),
a checkpoint stall C every tau seconds of training, and per interruption a loss L (half an
interval of lost work on average, plus restart and checkpoint read; planned ones checkpoint first
and lose no work), the wall clock W of T seconds of training satisfies
W = T (1 + C / tau) + W (lu Lu + lp Lp). The effective training time ratio is T / W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.goodput import failures
from meshplan.goodput.checkpoint import CheckpointCost, checkpoint_bytes, checkpoint_cost, interval_s
from meshplan.goodput.options import Resilience
from meshplan.goodput.stragglers import straggler_slowdown
from meshplan.hardware import Cluster

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Rates:
    """Interruptions per second of the job's wall clock and what each one costs, seconds."""

    unexpected_per_s: float
    planned_per_s: float
    unexpected_loss_s: float
    """Restart (less re-scheduling where a hot spare replaces the node) plus checkpoint read."""
    planned_loss_s: float

    @property
    def mtbf_s(self) -> float:
        """Mean time between unexpected interruptions (what the checkpoint interval hedges)."""
        return 1.0 / self.unexpected_per_s if self.unexpected_per_s else math.inf


def rates(cluster: Cluster, options: Resilience, cost: CheckpointCost) -> Rates:
    """The Rates of `cluster` (its GPUs, nodes and links) with `options`."""
    per_hour = failures.interruptions_per_hour(
        failures.exposure(cluster.num_gpus, cluster.gpus_per_node))
    planned = per_hour.pop("planned")
    spared = failures.hardware_share(per_hour) if options.hot_spare_nodes else 0.0
    restart = options.restart_s + options.reschedule_s * (1.0 - spared)
    return Rates(unexpected_per_s=sum(per_hour.values()) / 3600.0, planned_per_s=planned / 3600.0,
                 unexpected_loss_s=restart + cost.read_s,
                 planned_loss_s=options.restart_s + cost.read_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodput:
    """Where the wall clock of a run goes (seconds), and its ratios; per-day figures when no
    token budget is given (`training_s` is then one day of training)."""

    training_s: float
    """Time the run trains at the predicted step time (train tokens / tokens per second)."""
    straggler_s: float
    checkpoint_s: float
    lost_work_s: float
    restart_s: float
    wall_s: float
    expected_interruptions: float
    checkpoint_interval_s: float
    checkpoint: CheckpointCost
    mtbf_s: float
    spare_gpus: int
    has_budget: bool

    @property
    def effective_training_time_ratio(self) -> float:
        """Time spent training over elapsed time (Llama 3's definition; stragglers still train)."""
        return (self.training_s + self.straggler_s) / self.wall_s if self.wall_s else 0.0

    @property
    def slowdown(self) -> float:
        """Wall clock over training time at the predicted step (>= 1)."""
        return self.wall_s / self.training_s

    def waterfall(self) -> dict[str, float]:
        """Seconds by where they go, in the order a waterfall stacks them."""
        return {"training": self.training_s, "stragglers": self.straggler_s,
                "checkpoints": self.checkpoint_s, "lost_work": self.lost_work_s,
                "restarts": self.restart_s}

    def to_dict(self) -> dict:
        """The `goodput` JSON block: exactly its four headline fields."""
        budget = self.has_budget
        return {"expected_interruptions": self.expected_interruptions if budget else None,
                "checkpoint_interval_s": _finite(self.checkpoint_interval_s),
                "effective_training_time_ratio": self.effective_training_time_ratio,
                "days_to_train": self.wall_s / SECONDS_PER_DAY if budget else None}

    def detail_dict(self) -> dict:
        """What the headline rests on (the `goodput_detail` JSON block), SI units."""
        c = self.checkpoint
        return {"waterfall_s": self.waterfall(), "wall_s": self.wall_s,
                "days_to_train_without_failures": (self.training_s / SECONDS_PER_DAY
                                                   if self.has_budget else None),
                "interruptions_per_day": self.expected_interruptions * SECONDS_PER_DAY / self.wall_s,
                "mtbf_s": _finite(self.mtbf_s), "checkpoint_bytes": c.total_bytes,
                "checkpoint_bytes_per_rank": c.bytes_per_rank, "checkpoint_write_s": c.write_s,
                "checkpoint_read_s": c.read_s, "checkpoint_stall_s": c.stall_s,
                "spare_gpus": self.spare_gpus}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def goodput(model, cluster: Cluster, plan, step_time_s: float,
            train_tokens: float | None = None, options: Resilience | None = None) -> Goodput:
    """The Goodput of `plan` (its step time predicted) training `train_tokens` (None: one day)."""
    options = options or Resilience()
    cost = checkpoint_cost(checkpoint_bytes(model, plan), cluster, options)
    r = rates(cluster, options, cost)
    tau = interval_s(cost, r.mtbf_s, options)
    tokens_per_s = plan.global_batch_size * plan.seq_len / step_time_s
    training = train_tokens / tokens_per_s if train_tokens else SECONDS_PER_DAY
    stragglers = training * straggler_slowdown(cluster.num_gpus, options.cv())
    return _assemble(training, stragglers, cost, r, tau, options, cluster, train_tokens is not None)


def _assemble(training: float, stragglers: float, cost: CheckpointCost, r: Rates, tau: float,
              options: Resilience, cluster: Cluster, budget: bool) -> Goodput:
    """Solve the wall clock of `training` + `stragglers` seconds of work (module docstring)."""
    work = training + stragglers
    checkpoints = work * cost.stall_s / tau if math.isfinite(tau) and tau > 0 else 0.0
    lost_each = (tau / 2.0 if math.isfinite(tau) else 0.0) + (
        cost.write_s if options.checkpoint_mode == "async" else 0.0)
    burden = r.unexpected_per_s * (lost_each + r.unexpected_loss_s) + r.planned_per_s * r.planned_loss_s
    wall = (work + checkpoints) / (1.0 - burden) if burden < 1.0 else math.inf
    unexpected, planned = r.unexpected_per_s * wall, r.planned_per_s * wall
    return Goodput(training_s=training, straggler_s=stragglers, checkpoint_s=checkpoints,
                   lost_work_s=unexpected * lost_each,
                   restart_s=unexpected * r.unexpected_loss_s + planned * r.planned_loss_s,
                   wall_s=wall, expected_interruptions=unexpected + planned,
                   checkpoint_interval_s=tau, checkpoint=cost, mtbf_s=r.mtbf_s,
                   spare_gpus=options.hot_spare_nodes * cluster.gpus_per_node, has_budget=budget)


CHECKPOINT_FIELDS = ("framework", "precision", "optimizer", "method", "lora_rank", "lora_targets")
"""The plan fields `checkpoint_bytes` reads (bytes per parameter, trained parameters)."""


def wall_clock_factor(model, cluster: Cluster, options: Resilience | None = None):
    """A function (plan, objective) -> what goodput multiplies a failure-free score by: wall clock
    over training time (the same for any step time), times paid GPUs over working GPUs for cost.
    The answer depends on a plan only through its checkpoint size, which depends only on
    CHECKPOINT_FIELDS: the search asks once per distinct combination."""
    options = options or Resilience()
    memo: dict[tuple, float] = {}
    paid = (cluster.num_gpus + options.hot_spare_nodes * cluster.gpus_per_node) / cluster.num_gpus

    def factor(plan, objective: str) -> float:
        key = tuple(getattr(plan, name) for name in CHECKPOINT_FIELDS)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = goodput(model, cluster, plan, 1.0, None, options).slowdown
        return hit * (paid if objective == "cost" else 1.0)

    return factor
