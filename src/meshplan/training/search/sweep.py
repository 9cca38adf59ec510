"""The plan search's sweep: resolve each candidate, drop duplicates, check its memory, and bound
the step time of those that fit; in this process, or split by layout over forked workers.

This process works on parts too (`training.search.forked`). A forked worker gets the candidates by
inheritance (nothing is pickled on the way in) and sends back only numbers: counts, the first
reasons plans were invalid, and, per candidate index, the score of its step-time lower bound or
that it does not fit. Candidates of one layout stay in one part, so duplicates (which differ only
in fields that change nothing on one layout) never span two parts, and the parts joined in order
give the serial sweep's lists exactly: the same resolution, memory and bounds code runs on the
same inputs. The few plans the ranking then simulates are resolved and costed again in this
process when a worker found them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from types import SimpleNamespace

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.capabilities import cached_problems
from meshplan.training.estimate import StepParts, step_parts
from meshplan.training.search.forked import MAX_PARTS, can_fork, run_parts
from meshplan.training.memory.total import fits_memory
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.resolve import batch_split_refused, resolve_plan

PARALLEL_FROM = 200
"""Candidates below which a search stays in one process (forking and collecting a child takes a
few milliseconds, about what a few dozen candidates cost)."""
PARTS_PER_WORKER = 16
"""Parts per process: layouts differ in cost by tens of times (the ones that fit are costed),
so processes claim small parts as they finish."""


@dataclass
class Fit:
    """A plan that fits: its candidate index, the score of its step-time lower bound, and its
    step parts (None when a worker costed it: `parts_of` costs it again)."""

    index: int
    bound: float
    parts: StepParts | None = None


@dataclass
class Sweep:
    """What the sweep found, with the counts the search reports."""

    fitting: list[Fit] = field(default_factory=list)
    too_big: list = field(default_factory=list)
    """Candidate indices of resolved plans that do not fit."""
    reasons: dict[str, None] = field(default_factory=dict)
    invalid: int = 0
    evaluated: int = 0

    def add(self, other: Sweep) -> None:
        """Append the sweep of the candidates after this one's."""
        self.fitting += other.fitting
        self.too_big += other.too_big
        for reason in other.reasons:
            if len(self.reasons) < 3:
                self.reasons[reason] = None
        self.invalid += other.invalid
        self.evaluated += other.evaluated


@dataclass(frozen=True)
class Task:
    """One sweep's inputs: candidates are `base` with each of `updates`; `bound_score` turns a
    plan's step-time lower bound into its ranking score."""

    base: TrainingPlan
    updates: list[dict]
    model: ModelSpec
    cluster: Cluster
    bound_score: Callable[[float, object], float]


def sweep(task: Task, progress: Callable[[int, int], None] | None = None,
          workers: int = 1) -> Sweep:
    """The sweep of `task`, over `workers` forked processes when there are enough candidates
    (and fork exists); `progress(done, total)` as it goes."""
    if workers > 1 and len(task.updates) >= PARALLEL_FROM and can_fork():
        return _parallel(task, workers, progress)
    return _sweep_range(task, 0, len(task.updates), progress, keep_parts=True)


def _sweep_range(task: Task, start: int, stop: int, progress: Callable[[int, int], None] | None,
                 keep_parts: bool) -> Sweep:
    """Candidates `start` to `stop` of `task`, in order."""
    out, seen = Sweep(), set()
    fields = dict(task.base)
    total = len(task.updates)
    for index in range(start, stop):
        if progress is not None and index % 64 == 0:
            progress(index, total)
        resolved = _admit(out, seen, task, fields, task.updates[index])
        if resolved is None:
            continue
        if not fits_memory(task.model, task.cluster, resolved):
            out.too_big.append(index)
            continue
        parts = step_parts(task.model, task.cluster, resolved)
        bound = task.bound_score(parts.lower_bound_s(), resolved)
        out.fitting.append(Fit(index, bound, parts if keep_parts else None))
    return out


def _admit(out: Sweep, seen: set, task: Task, fields: dict, update: dict):
    """The resolved candidate, or None when it is invalid (counted, with the first reasons) or
    the same run as one seen before. A batch that cannot split over the layout's DP ranks is
    refused before the plan is built (its message is built for the first few)."""
    if batch_refused(task.base, update, task.cluster.num_gpus) and len(out.reasons) >= 3:
        out.invalid += 1
        return None
    resolved = launchable(PlanFields(fields, update), task.model, task.cluster)
    if isinstance(resolved, str):
        out.invalid += 1
        if len(out.reasons) < 3:
            out.reasons[resolved] = None
        return None
    key = identity(resolved)
    if key in seen:
        return None  # the same plan as one already costed (e.g. ZeRO 1/2/3 on one GPU)
    seen.add(key)
    out.evaluated += 1
    return resolved


def resolve_candidate(task: Task, index: int):
    """Candidate `index` of `task` resolved (a plan the sweep found launchable)."""
    return launchable(PlanFields(dict(task.base), task.updates[index]), task.model, task.cluster)


def parts_of(task: Task, fit: Fit) -> StepParts:
    """The step parts of a fitting plan (costed again when a worker found it)."""
    if fit.parts is not None:
        return fit.parts
    return step_parts(task.model, task.cluster, resolve_candidate(task, fit.index))


# --- forked workers -------------------------------------------------------------------------


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_workers() -> int:
    """Processes a search shares its work with when the caller does not say: on Linux the CPUs
    this process may use, or 1 when another thread runs (a child would inherit that thread's
    locks in whatever state they are: a web server, a notebook kernel). Elsewhere 1: macOS's
    system libraries may run threads of their own, which is why Python does not fork there by
    default either (an explicit `workers` still forks)."""
    import threading

    return usable_cpus() if _on_linux() and threading.active_count() == 1 else 1


def _on_linux() -> bool:
    return sys.platform == "linux"


def _parallel(task: Task, workers: int, progress: Callable[[int, int], None] | None) -> Sweep:
    """The sweep split by layout over this process and `workers - 1` forked children
    (`training.search.forked`); this process keeps the step parts of what it costed itself."""
    spans = layout_parts(task.updates, min(MAX_PARTS, workers * PARTS_PER_WORKER))

    def work(i: int, in_parent: bool) -> Sweep:
        return _sweep_range(task, *spans[i], None, keep_parts=in_parent)

    total = len(task.updates)
    told = None if progress is None else (lambda done: progress(done, total))
    out = Sweep()
    for part in run_parts([b - a for a, b in spans], work, workers, told):
        out.add(part)
    return out


def layout_parts(updates: list[dict], n: int) -> list[tuple[int, int]]:
    """About `n` contiguous (start, stop) ranges of `updates` of similar size, each cut where the
    layout changes (the layout fields lead every update, so one layout's candidates are
    contiguous)."""
    size = max(1, -(-len(updates) // n))
    spans, start = [], 0
    while start < len(updates):
        stop = min(start + size, len(updates))
        while stop < len(updates) and _layout(updates[stop]) == _layout(updates[stop - 1]):
            stop += 1
        spans.append((start, stop))
        start = stop
    return spans


def _layout(update: dict) -> tuple:
    return update["tp"], update["pp"], update["vpp"], update["cp"], update["ep"], update["etp"]


# --- one candidate --------------------------------------------------------------------------

class PlanFields(SimpleNamespace):
    """A candidate's fields as plain attributes (`base` with `update`), which is all
    `resolve_plan` reads: a validated pydantic copy of the base plan for each of thousands of
    candidates cost a fifth of a search. Every value comes from the validated base plan or an
    axis of the search."""

    def __init__(self, base: dict, update: dict) -> None:
        self.__dict__.update(base)
        self.__dict__.update(update)


def batch_refused(base: TrainingPlan, update: dict, world: int) -> bool:
    """`resolve.batch_split_refused` of the plan `base` with `update` would be (search layouts
    divide the GPUs, with dp left open)."""
    pp = update["pp"]
    return batch_split_refused(base.global_batch_size, update["micro_batch_size"],
                               world // (update["tp"] * pp * update["cp"]), pp, update["vpp"],
                               update["schedule"])


def launchable(plan, model: ModelSpec, cluster: Cluster):
    """The resolved plan, or why it is invalid: a layout that does not divide, or a field the
    framework could not launch (such a plan is never ranked)."""
    try:
        resolved = resolve_plan(plan, model, cluster)
    except ConfigError as exc:
        return str(exc)
    cannot = cached_problems(plan.framework, resolved, model)
    return cannot[0] if cannot else resolved


IGNORED = ("chosen", "warnings")


def identity(plan) -> tuple:
    """What makes two resolved plans different runs. With one rank per shard group (dp x cp = 1
    and one expert replica) ZeRO stages shard nothing, so every dp_sharding is the same plan; the
    candidates come lowest stage first, so the simplest one is kept."""
    names = _identity_fields(type(plan))
    values = list(attrgetter(*names)(plan))
    if plan.shard_group == 1 and plan.expert_dp == 1:
        values[names.index("dp_sharding")] = None
    if plan.cp == 1 and plan.balance == "per-doc-cp":
        values[names.index("balance")] = "none"  # one CP rank: splitting each document changes nothing
    if plan.ep == 1 and plan.moe_balance == "eplb":
        values[names.index("moe_balance")] = "none"  # one EP rank holds every expert: replicas change nothing
    return tuple(values)


@lru_cache(maxsize=8)
def _identity_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` that tell two runs apart (all but IGNORED), in declaration order."""
    return tuple(f for f in cls.__dataclass_fields__ if f not in IGNORED)
