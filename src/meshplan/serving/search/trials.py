"""How many requests one capacity trial simulates: enough that its latency percentiles come from a
warmed-up system, not from the empty one the run starts with.

A trial replays the unit workload compressed to a rate. At a high rate a fixed number of requests
all arrive within seconds, while each one lives for TTFT + output_len x TPOT: the run ends before
the running batch reaches its steady size, so its P99 TPOT reads the light early batches and
over-promises capacity. The rule here sizes a trial by duration instead: its arrivals span
WINDOW_LIFETIMES request lifetimes, where a lifetime is the longest a request meeting the SLOs can
live (TTFT objective + mean output tokens x TPOT objective, or the E2E objective when shorter),
with at least MIN_TRIAL_REQUESTS and at most MAX_TRIAL_REQUESTS requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from meshplan.serving.traffic.workload import Workload

if TYPE_CHECKING:
    from meshplan.serving.search.capacity import Targets

WINDOW_LIFETIMES = 8.0
"""Request lifetimes the arrivals of a trial span: the first one fills the batch, the others
are measured at (or near) its steady size."""

MIN_TRIAL_REQUESTS = 800
"""Fewest requests of a trial (the former fixed count): low rates keep their old trials."""

MAX_TRIAL_REQUESTS = 16_000
"""Most requests of a trial, which bounds the search's time at very high rates."""


def lifetime_s(unit: Workload, t: Targets) -> float | None:
    """Longest a request meeting `t` lives on average: TTFT + mean output tokens x TPOT, or the
    E2E objective when smaller. None when neither TPOT nor E2E is bounded (a TTFT-only SLO)."""
    outs = [r.output_len for r in unit.requests]
    if not outs:
        return None
    bounds = []
    if t.tpot_ms is not None:
        bounds.append(((t.ttft_ms or 0.0) + sum(outs) / len(outs) * t.tpot_ms) / 1e3)
    if t.e2e_ms is not None:
        bounds.append(t.e2e_ms / 1e3)
    return min(bounds) if bounds else None


def window_s(unit: Workload, t: Targets) -> float | None:
    """Seconds of arrivals a trial should span (None: no duration rule applies)."""
    life = lifetime_s(unit, t)
    return None if life is None else WINDOW_LIFETIMES * life


def requests_for(window: float, rate: float) -> int:
    """Requests whose arrivals at `rate` span `window` seconds, within the trial bounds."""
    return int(min(MAX_TRIAL_REQUESTS, max(MIN_TRIAL_REQUESTS, math.ceil(window * rate))))


def sized_unit(make: Callable[[int], tuple[Workload, float]], t: Targets,
               num_requests: int | None) -> tuple[Workload, float, float | None]:
    """(unit workload, target rate, trial window) of a search. `make(n)` builds the unit with n
    requests and tells the target rate. An explicit `num_requests` keeps the old rule: that many
    requests in every trial, no window. Otherwise the unit holds enough requests for the trial
    at the target rate itself (the verification of the plans)."""
    if num_requests is not None:
        return *make(num_requests), None
    unit, rate = make(MIN_TRIAL_REQUESTS)
    window = window_s(unit, t)
    if window is None:
        return unit, rate, None
    n = requests_for(window, rate)
    if n > len(unit):
        unit, rate = make(n)
    return unit, rate, window
