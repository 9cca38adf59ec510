"""Pipeline schedules as op orders: the list of forwards and backwards each stage runs, in order.

A schedule is a function `(pp, vpp, num_microbatches) -> one list of op codes per stage`, added to
`SCHEDULES` by `@register_schedule(name)`. The executor in `pipeline_sim` runs each list in order
and blocks on receives, as the engines do, so an order alone fixes the timeline.

An op is a plain int, `(microbatch * pp * vpp + virtual_stage) * 3 + kind` with kind F=0, B=1, W=2.
Chunk c of stage s is virtual stage c * pp + s (Megatron's interleaving: the model's layers go
stage 0 chunk 0, stage 1 chunk 0, ..., stage pp-1 chunk 0, stage 0 chunk 1, ...). Ints keep the
simulation free of per-op objects; `op_code` and `decode` convert.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from meshplan.errors import ConfigError

F, B, W = 0, 1, 2
"""Op kinds: forward, backward (input-gradient part when the schedule splits it), weight grad."""
KIND_NAMES = ("F", "B", "W")

Orders = list[list[int]]
OrderFn = Callable[[int, int, int], Orders]
"""(pp, vpp, num_microbatches) -> per stage, the op codes it runs, in order."""


class ScheduleError(ConfigError, ValueError):
    """A pipeline schedule that cannot run with the given stages, chunks and micro-batches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One registered pipeline schedule."""

    name: str
    orders: OrderFn
    """Builds every stage's op order."""
    split_backward: bool
    """Backward runs as B (input gradient) then a separate W (weight gradient) op (zero-bubble)."""
    own_ends: bool = False
    """Whatever pp, vpp and the batch count, every stage's order starts with a forward of its own
    first chunk (virtual stage = the stage) and ends with a backward of it: what a step-time
    lower bound reads of the orders, known without building them (tested against them)."""


SCHEDULES: dict[str, Schedule] = {}


def register_schedule(name: str, *, split_backward: bool = False,
                      own_ends: bool = False) -> Callable[[OrderFn], OrderFn]:
    """Add an order builder to SCHEDULES under `name`."""

    def decorate(fn: OrderFn) -> OrderFn:
        SCHEDULES[name] = Schedule(name=name, orders=fn, split_backward=split_backward,
                                   own_ends=own_ends)
        return fn

    return decorate


@lru_cache(maxsize=64)
def cached_orders(schedule: str, pp: int, vpp: int, m: int) -> tuple[tuple[int, ...], ...]:
    """SCHEDULES[schedule].orders(pp, vpp, m) as tuples, built once per shape (a search asks
    for the same few shapes hundreds of times)."""
    return tuple(tuple(order) for order in SCHEDULES[schedule].orders(pp, vpp, m))


def op_code(kind: int, microbatch: int, virtual_stage: int, num_virtual: int) -> int:
    """The int that stands for one op."""
    return (microbatch * num_virtual + virtual_stage) * 3 + kind


def decode(code: int, num_virtual: int) -> tuple[int, int, int]:
    """(kind, microbatch, virtual_stage) of an op code."""
    index, kind = divmod(code, 3)
    microbatch, virtual_stage = divmod(index, num_virtual)
    return kind, microbatch, virtual_stage


def _one_chunk(name: str, vpp: int) -> None:
    if vpp != 1:
        raise ScheduleError(f"pipeline schedule {name!r} runs one model chunk per stage, got "
                            f"vpp={vpp}; use 'interleaved' for virtual stages (or 'gpipe')")


def _warmup_steady_cooldown(fwd: list[int], bwd: list[int], warmup: int) -> list[int]:
    """`warmup` forwards, then one forward and one backward in turn, then the backwards left."""
    steady = len(fwd) - warmup
    pairs = [0] * (2 * steady)
    pairs[0::2] = fwd[warmup:]
    pairs[1::2] = bwd[:steady]
    return fwd[:warmup] + pairs + bwd[steady:]


def _one_f_one_b_stage(stage: int, pp: int, m: int) -> list[int]:
    fwd = [(mb * pp + stage) * 3 for mb in range(m)]
    return _warmup_steady_cooldown(fwd, [code + B for code in fwd], min(pp - stage - 1, m))


@register_schedule("gpipe", own_ends=True)
def gpipe(pp: int, vpp: int, m: int) -> Orders:
    """All forwards, then all backwards, micro-batches in order 0..m-1 (torch.distributed.pipelining
    ScheduleGPipe runs its backwards in micro-batch order too). With vpp > 1 it goes chunk by chunk:
    forwards chunk 0 first, backwards from the last chunk."""
    nv = pp * vpp
    orders = []
    for s in range(pp):
        fwd = [(mb * nv + c * pp + s) * 3 for c in range(vpp) for mb in range(m)]
        bwd = [(mb * nv + c * pp + s) * 3 + B for c in reversed(range(vpp)) for mb in range(m)]
        orders.append(fwd + bwd)
    return orders


@register_schedule("1f1b", own_ends=True)
def one_f_one_b(pp: int, vpp: int, m: int) -> Orders:
    """PipeDream-Flush (Megatron without interleaving): stage s runs min(pp - s - 1, m) warm-up
    forwards, then one forward and one backward in turn, then the cool-down backwards."""
    _one_chunk("1f1b", vpp)
    return [_one_f_one_b_stage(s, pp, m) for s in range(pp)]


@register_schedule("interleaved", own_ends=True)
def interleaved(pp: int, vpp: int, m: int) -> Orders:
    """Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving): micro-batches
    in groups of pp, each group through chunk 0, chunk 1, ...; backwards take the chunks in
    reverse. Stage s warms up with 2 (pp - s - 1) + (vpp - 1) pp forwards (at most m vpp)."""
    if vpp < 2:
        raise ScheduleError(f"pipeline schedule 'interleaved' needs vpp >= 2 model chunks per "
                            f"stage, got vpp={vpp}; use '1f1b' for one chunk")
    if m % pp:
        raise ScheduleError(f"pipeline schedule 'interleaved' needs num_microbatches divisible by "
                            f"pp={pp}, got {m}; valid: a multiple of {pp}")
    nv = pp * vpp
    table = [(mb, c) for g in range(0, m, pp) for c in range(vpp) for mb in range(g, g + pp)]
    fbase = [(mb * nv + c * pp) * 3 for mb, c in table]
    bbase = [(mb * nv + (vpp - 1 - c) * pp) * 3 + B for mb, c in table]
    orders = []
    for s in range(pp):
        warmup = min(2 * (pp - s - 1) + (vpp - 1) * pp, m * vpp)
        fwd = [code + 3 * s for code in fbase]
        orders.append(_warmup_steady_cooldown(fwd, [code + 3 * s for code in bbase], warmup))
    return orders


def _defer_weight_grads(order: list[int], lag: int) -> list[int]:
    """Split each backward into B then W: after the j-th B comes the W of the (j - lag)-th B;
    the last `lag` W's run after the final B."""
    out: list[int] = []
    weight_grads: list[int] = []
    for code in order:
        out.append(code)
        if code % 3 == B:
            weight_grads.append(code + 1)
            if len(weight_grads) > lag:
                out.append(weight_grads[-1 - lag])
    out.extend(weight_grads[max(len(weight_grads) - lag, 0):])
    return out


@register_schedule("zero-bubble", split_backward=True)
def zero_bubble_h1(pp: int, vpp: int, m: int) -> Orders:
    """ZB-H1 (Qi et al. 2023, Fig. 3 top): 1F1B's order of F and B (B = input gradient only),
    with stage s running the weight gradient W of micro-batch i right after the B of micro-batch
    i + s; the W's fill the cool-down bubbles and in-flight activations stay those of 1F1B."""
    _one_chunk("zero-bubble", vpp)
    return [_defer_weight_grads(_one_f_one_b_stage(s, pp, m), lag=s) for s in range(pp)]
