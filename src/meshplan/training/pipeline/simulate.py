"""Pipeline-schedule simulator: step time, bubble and in-flight activations of a schedule.

Each stage runs its schedule's op list (`pipeline_orders`) in order, one op at a time. An op
starts when its stage is free and its inputs are there: a forward needs the previous virtual
stage's forward (+ `p2p_s` when it ran on another stage); a backward needs its own forward and the
next virtual stage's backward (+ `p2p_s`); a weight-gradient op needs its backward. The events it
produces are what `meshplan.report.trace.chrome_trace` draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from meshplan.errors import UnknownNameError
from meshplan.training.pipeline.orders import (
    B, F, KIND_NAMES, SCHEDULES, Schedule, ScheduleError, cached_orders, decode, register_schedule,
)

__all__ = ["SCHEDULES", "PipeEvent", "PipelineResult", "ScheduleError", "StageTimes",
           "register_schedule", "simulate_pipeline", "step_lower_bound"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTimes:
    """Durations of one micro-batch on one pipeline stage, per model chunk (virtual stage)."""

    forward_s: tuple[float, ...]
    """Forward time of each chunk on this stage (len = vpp)."""
    backward_s: tuple[float, ...]
    """Full backward time (input grad + weight grad) of each chunk."""
    weight_grad_s: tuple[float, ...] = ()
    """Weight-gradient part of backward_s per chunk (zero-bubble's W); empty = half of it."""

    def __post_init__(self) -> None:
        vpp = len(self.forward_s)
        if vpp == 0 or len(self.backward_s) != vpp or len(self.weight_grad_s) not in (0, vpp):
            raise ScheduleError(f"StageTimes needs one forward_s, backward_s (and weight_grad_s, "
                                f"if given) per chunk, got {len(self.forward_s)}, "
                                f"{len(self.backward_s)}, {len(self.weight_grad_s)}")
        for t in (*self.forward_s, *self.backward_s, *self.weight_grad_s):
            if not (math.isfinite(t) and t >= 0):
                raise ScheduleError(f"StageTimes durations must be finite and >= 0, got {t}")
        for c in range(vpp):
            if self.weight_grad(c) > self.backward_s[c]:
                raise ScheduleError(f"StageTimes weight_grad_s[{c}]={self.weight_grad_s[c]} "
                                    f"exceeds backward_s[{c}]={self.backward_s[c]}")

    def weight_grad(self, chunk: int) -> float:
        """Weight-gradient time of `chunk` (half the backward when not given)."""
        return self.weight_grad_s[chunk] if self.weight_grad_s else self.backward_s[chunk] / 2


@dataclass(frozen=True, slots=True, kw_only=True)
class PipeEvent:
    """One op or transfer on one stage's timeline."""

    stage: int
    kind: str
    """"F", "B", "W" (zero-bubble weight grad), "send" (activation or gradient to a neighbour)."""
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    """One simulated training step of a pipeline schedule."""

    step_time_s: float
    """From the first forward start to the last backward (or weight-grad) end over all stages."""
    bubble_fraction: float
    """1 - (mean over stages of busy compute time) / step_time_s."""
    busy_s: tuple[float, ...]
    """Compute time per stage."""
    peak_in_flight: tuple[int, ...]
    """Per stage, the most (microbatch, chunk) forwards done whose backward (B) has not finished."""
    events: tuple[PipeEvent, ...]
    """Per stage, its ops in run order, each followed by its send when it has one; () unless
    simulate_pipeline(..., with_events=True)."""

    def to_dict(self) -> dict:
        """Plain numbers (no events)."""
        return {"step_time_s": self.step_time_s, "bubble_fraction": self.bubble_fraction,
                "busy_s": list(self.busy_s), "peak_in_flight": list(self.peak_in_flight)}


def simulate_pipeline(schedule: str, stages: Sequence[StageTimes], num_microbatches: int,
                      p2p_s: float, *, with_events: bool = True) -> PipelineResult:
    """Run `schedule` over `stages` (one StageTimes per pipeline stage) for one training step."""
    spec = _lookup(schedule)
    pp, vpp = _check(stages, num_microbatches, p2p_s)
    m = num_microbatches
    orders = cached_orders(spec.name, pp, vpp, m)
    dur = _durations(stages, spec.split_backward) * m
    hop = p2p_s if pp > 1 else 0.0
    start, end, peak = _execute(orders, dur, _input_offsets(pp * vpp) * m, hop, pp * vpp)
    step = max(end[o[-1]] for o in orders) - min(start[o[0]] for o in orders)
    busy = tuple(m * (sum(st.forward_s) + sum(st.backward_s)) for st in stages)
    bubble = 1.0 - sum(busy) / pp / step if step > 0 else 0.0
    events = _events(orders, start, end, pp, vpp, hop) if with_events else ()
    return PipelineResult(step_time_s=step, bubble_fraction=bubble, busy_s=busy,
                          peak_in_flight=tuple(peak), events=events)


def step_lower_bound(schedule: str, stages: Sequence[StageTimes], num_microbatches: int,
                     p2p_s: float) -> float:
    """A lower bound on `simulate_pipeline(...).step_time_s` in O(pp), exact for 1F1B over equal
    stages: stage s cannot start before micro-batch 0's forward crossed stages 0..s-1, then runs
    all its own work, and when its last op is the backward of its first chunk, that gradient
    still has to cross stages s-1..0."""
    spec = _lookup(schedule)
    pp, vpp = _check(stages, num_microbatches, p2p_s)
    ends = _own_first_and_last(spec.name, pp, vpp, num_microbatches)
    hop = p2p_s if pp > 1 else 0.0
    fill = drain = bound = 0.0
    for st, (starts_own, ends_own) in zip(stages, ends):
        busy = num_microbatches * (sum(st.forward_s) + sum(st.backward_s))
        head = fill if starts_own else 0.0
        tail = drain if ends_own else 0.0
        bound = max(bound, head + busy + tail)
        b = st.backward_s[0] - (st.weight_grad(0) if spec.split_backward else 0.0)
        fill, drain = fill + st.forward_s[0] + hop, drain + b + hop
    return bound


@lru_cache(maxsize=256)
def _own_first_and_last(schedule: str, pp: int, vpp: int, m: int) -> tuple[tuple[bool, bool], ...]:
    """Per stage: whether its first op is a forward of its own first chunk (virtual stage = the
    stage), and its last a backward of it: what `step_lower_bound` reads of each order, once
    per shape (a search bounds hundreds of plans over a few shapes); without building the
    orders when the schedule declares both (`Schedule.own_ends`)."""
    if SCHEDULES[schedule].own_ends:
        return ((True, True),) * pp
    orders = cached_orders(schedule, pp, vpp, m)
    out = []
    for s in range(pp):
        first, last = decode(orders[s][0], pp * vpp), decode(orders[s][-1], pp * vpp)
        out.append((first[0] == F and first[2] == s, last[0] == B and last[2] == s))
    return tuple(out)


def _lookup(schedule: str) -> Schedule:
    if schedule not in SCHEDULES:
        raise UnknownNameError("pipeline schedule", schedule, SCHEDULES)
    return SCHEDULES[schedule]


def _check(stages: Sequence[StageTimes], m: int, p2p_s: float) -> tuple[int, int]:
    """(pp, vpp) after checking the inputs every schedule needs."""
    if not stages:
        raise ScheduleError("stages must list at least one pipeline stage, got none")
    vpps = sorted({len(st.forward_s) for st in stages})
    if len(vpps) > 1:
        raise ScheduleError(f"every stage needs the same number of chunks, got vpp in {vpps}")
    if not isinstance(m, int) or m < 1:
        raise ScheduleError(f"num_microbatches must be an integer >= 1, got {m!r}")
    if not (math.isfinite(p2p_s) and p2p_s >= 0):
        raise ScheduleError(f"p2p_s must be finite and >= 0, got {p2p_s}")
    return len(stages), vpps[0]


def _durations(stages: Sequence[StageTimes], split: bool) -> list[float]:
    """Per op code of one micro-batch: F, B, W times of each virtual stage in turn."""
    pp, vpp = len(stages), len(stages[0].forward_s)
    out: list[float] = []
    for v in range(pp * vpp):
        st, c = stages[v % pp], v // pp
        w = st.weight_grad(c) if split else 0.0
        out += (st.forward_s[c], st.backward_s[c] - w, w)
    return out


def _input_offsets(num_virtual: int) -> list[int]:
    """Per op code of one micro-batch: offset to the op on the neighbouring virtual stage it
    waits for (F: previous forward, B: next backward), 0 when none."""
    out: list[int] = []
    for v in range(num_virtual):
        out += (-3 if v > 0 else 0, 3 if v < num_virtual - 1 else 0, 0)
    return out


def _execute(orders: list[list[int]], dur: list[float], offs: list[int], hop: float,
             num_virtual: int) -> tuple[list[float], list[float], list[int]]:
    """Run every stage's ops in order, each as soon as its stage is free and its inputs arrived.
    A stage that waits for an input parks on that op; finishing the op wakes it up."""
    pp, n = len(orders), len(dur)
    start, end, waiter = [0.0] * n, [-1.0] * n, [-1] * n
    free, pos, alive, peak = [0.0] * pp, [0] * pp, [0] * pp, [0] * pp
    ready = list(range(pp - 1, -1, -1))
    while ready:
        s = ready.pop()
        order, i, t_free, a, top = orders[s], pos[s], free[s], alive[s], peak[s]
        while i < len(order):
            code = order[i]
            kind, t = code % 3, t_free
            if kind:  # B after its own forward, W after its own B (same stage)
                e = end[code - 1]
                if e < 0.0:
                    waiter[code - 1] = s
                    break
                t = e if e > t else t
            o = offs[code]
            if o:
                e = end[code + o]
                if e < 0.0:
                    waiter[code + o] = s
                    break
                e += hop
                t = e if e > t else t
            start[code] = t
            end[code] = t_free = t + dur[code]
            if kind == F:
                a += 1
                top = a if a > top else top
            elif kind == B:
                a -= 1
            if waiter[code] >= 0:
                ready.append(waiter[code])
            i += 1
        pos[s], free[s], alive[s], peak[s] = i, t_free, a, top
    _check_finished(orders, pos, num_virtual)
    return start, end, peak


def _check_finished(orders: list[list[int]], pos: list[int], num_virtual: int) -> None:
    stuck = [s for s, order in enumerate(orders) if pos[s] < len(order)]
    if stuck:
        s = stuck[0]
        kind, mb, v = decode(orders[s][pos[s]], num_virtual)
        raise RuntimeError(f"pipeline order deadlocks: stages {stuck} cannot proceed; stage {s} "
                           f"waits at op {pos[s]}, {KIND_NAMES[kind]} of micro-batch {mb} on "
                           f"virtual stage {v}")


def _events(orders: list[list[int]], start: list[float], end: list[float], pp: int, vpp: int,
            hop: float) -> tuple[PipeEvent, ...]:
    """Every op, plus a send on the producing stage for each cross-stage transfer."""
    nv = pp * vpp
    out: list[PipeEvent] = []
    for s, order in enumerate(orders):
        for code in order:
            index, kind = divmod(code, 3)  # inline decode(): this loop is the events' hot path
            mb, v = divmod(index, nv)
            t1 = end[code]
            out.append(PipeEvent(stage=s, kind=KIND_NAMES[kind], microbatch=mb, chunk=v // pp,
                                 start_s=start[code], end_s=t1))
            if pp > 1 and ((kind == F and v < nv - 1) or (kind == B and v > 0)):
                out.append(PipeEvent(stage=s, kind="send", microbatch=mb, chunk=v // pp,
                                     start_s=t1, end_s=t1 + hop))
    return tuple(out)
