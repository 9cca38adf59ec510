"""Micro-batches whose activations a pipeline schedule keeps alive on each stage (its peak).

One function per schedule, registered by name. `in_flight_chunks(stage)` counts model-chunk
activations: for non-interleaved schedules a chunk is the whole stage.
"""

from __future__ import annotations

from collections.abc import Callable

InFlight = Callable[[int, int, int, int], int]
"""(stage, pp, vpp, num_microbatches) -> model-chunk activations alive at the stage's peak."""

SCHEDULES: dict[str, InFlight] = {}


def register(name: str) -> Callable[[InFlight], InFlight]:
    """Add a schedule's in-flight rule under `name`."""

    def decorate(fn: InFlight) -> InFlight:
        SCHEDULES[name] = fn
        return fn

    return decorate


@register("gpipe")
def gpipe(stage: int, pp: int, vpp: int, m: int) -> int:
    """All forwards before any backward: every micro-batch of every chunk is alive."""
    return m * vpp


@register("1f1b")
def one_f_one_b(stage: int, pp: int, vpp: int, m: int) -> int:
    """Stage r runs pp - r warm-up forwards before its first backward (PipeDream-Flush)."""
    return min(pp - stage, m)


@register("zero-bubble")
def zero_bubble(stage: int, pp: int, vpp: int, m: int) -> int:
    """ZB-H1 keeps 1F1B's activation peak (weight-gradient work fills the bubbles)."""
    return min(pp - stage, m)


@register("interleaved")
def interleaved(stage: int, pp: int, vpp: int, m: int) -> int:
    """Megatron's interleaved 1F1B: 2(pp - r - 1) + (vpp - 1) pp warm-up chunks, plus one."""
    warmup = 2 * (pp - stage - 1) + (vpp - 1) * pp
    return min(warmup + 1, m * vpp)


def in_flight_chunks(schedule: str, stage: int, pp: int, vpp: int, m: int) -> int:
    """Model-chunk activations alive at stage `stage`'s peak under `schedule`."""
    return SCHEDULES[schedule](stage, pp, vpp, m)
