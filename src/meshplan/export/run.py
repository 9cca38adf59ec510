"""What a launch config needs beyond the plan: how long the run is and how it is started.

A plan fixes the layout; a runnable config also needs a training length (from
`train plan --train-tokens`, else a placeholder the user must set) and a launcher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.training.layout.resolve import ResolvedPlan

LAUNCHERS = ("torchrun", "slurm")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """The run around a plan (the same for every engine)."""

    train_tokens: float | None = None
    """Tokens in the run; None writes a clearly marked placeholder for the training length."""
    launcher: str = "torchrun"
    """torchrun (the script runs on every node) or slurm (an sbatch script that sruns torchrun)."""

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"--launcher {self.launcher!r}: use {' or '.join(LAUNCHERS)}")

    def steps(self, plan: ResolvedPlan) -> int | None:
        """Optimizer steps covering `train_tokens` (rounded up), or None without a token budget."""
        if self.train_tokens is None:
            return None
        return max(1, math.ceil(self.train_tokens / (plan.global_batch_size * plan.seq_len)))
