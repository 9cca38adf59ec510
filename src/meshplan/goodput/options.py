"""What the cluster and the job do about failures: restart time, hot spares, the storage tier
checkpoints go to, and how they are taken. Defaults come from reliability.yaml (cited there)."""

from __future__ import annotations

from dataclasses import dataclass, field

from meshplan.errors import ConfigError
from meshplan.goodput.data import reliability

CHECKPOINT_MODES = ("sync", "async")


def _default(section: str, key: str) -> float:
    return float(reliability()[section][key])


@dataclass(frozen=True, slots=True, kw_only=True)
class Resilience:
    """Failure handling of a training run (cluster options; SI units)."""

    restart_s: float = field(default_factory=lambda: _default("restart", "restart_s"))
    """Detection, restart and re-scheduling of the whole job after an interruption, seconds
    (default 600: Meta's 10-minute recovery stall of synchronous training at O(100K) GPUs)."""
    reschedule_s: float = 0.0
    """Extra wait for a replacement node after a hardware failure when no hot spare is ready,
    seconds (0: the default restart_s, measured with spare capacity, already includes it)."""
    hot_spare_nodes: int = 0
    """Idle nodes kept ready to replace a failed one: hardware failures skip reschedule_s; the
    spares are paid for (GPU-hours and cost count them)."""
    checkpoint_write_bytes_per_s: float = field(
        default_factory=lambda: _default("storage", "write_bytes_per_s"))
    """Aggregate write bandwidth of the checkpoint storage tier, bytes/s (default Llama 3's
    Tectonic: 2 TB/s sustained)."""
    checkpoint_read_bytes_per_s: float = field(
        default_factory=lambda: _default("storage", "read_bytes_per_s"))
    """Aggregate read bandwidth of the storage tier when a restart loads the checkpoint, bytes/s."""
    checkpoint_mode: str = "sync"
    """sync: the step waits for the write; async: it waits only for the device-to-host copy."""
    checkpoint_interval_s: float | None = None
    """Seconds of training between checkpoints; None: the Young/Daly optimum."""
    straggler_cv: float | None = None
    """Coefficient of variation of per-GPU speed; None: from the cited variation (0.02)."""

    def __post_init__(self) -> None:
        if self.checkpoint_mode not in CHECKPOINT_MODES:
            raise ConfigError(f"checkpoint mode {self.checkpoint_mode!r}: use sync or async")
        if self.hot_spare_nodes < 0:
            raise ConfigError(f"hot spare nodes {self.hot_spare_nodes}: give 0 or more")

    def cv(self) -> float:
        """The straggler coefficient of variation in use."""
        if self.straggler_cv is not None:
            return self.straggler_cv
        row = reliability()["stragglers"]
        return float(row["performance_variation"]) / float(row["sigmas_in_variation"])
