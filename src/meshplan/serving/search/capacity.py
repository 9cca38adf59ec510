"""Capacity of one deployment: the highest request rate at which the SLOs still hold.

SLOs are percentiles of per-request latencies (e.g. P90 TTFT <= 2 s and P90 TPOT <= 100 ms).
The search bisects on the request rate. Every trial replays the same requests with the same
lengths and the same arrival pattern, only compressed in time (common random numbers), so the
latency-vs-rate curve is monotone up to scheduling effects and noise cannot flip the answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from meshplan.checks import optional, positive
from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.serving.metrics.summary import SLO
from meshplan.serving.plan import ServingPlan
from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.search.trials import MIN_TRIAL_REQUESTS, requests_for
from meshplan.serving.simulate import SimulationResult, simulate
from meshplan.serving.traffic.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class Targets:
    """Latency objectives at one percentile of requests."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 90.0

    def __post_init__(self) -> None:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ConfigError("give at least one SLO: --slo-ttft-ms, --slo-tpot-ms or --slo-e2e-ms")
        if not 0 < self.percentile <= 100:
            raise ConfigError(f"--slo-percentile {self.percentile} must be in (0, 100]")
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            optional(positive, f"--slo-{name.replace('_', '-')}", getattr(self, name))

    def slo(self) -> SLO:
        """The same objectives as a goodput SLO (a request is good when it meets all of them)."""
        return SLO(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, e2e_ms=self.e2e_ms)

    def label(self) -> str:
        """E.g. 'P90 TTFT <= 2000 ms, P90 TPOT <= 100 ms'."""
        p = f"P{self.percentile:g}"
        parts = [f"{p} {name} <= {v:g} ms" for name, v in
                 (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("E2E", self.e2e_ms)) if v is not None]
        return ", ".join(parts)


def margins(records: list[RequestRecord], t: Targets) -> dict[str, float]:
    """Observed percentile / objective for each SLO (<= 1 means met)."""
    def pct(values: list[float]) -> float:
        arr = np.asarray([v for v in values if v == v])
        return float(np.percentile(arr, t.percentile)) if arr.size else 0.0

    out = {}
    if t.ttft_ms is not None:
        out["ttft"] = pct([r.ttft_s * 1e3 for r in records]) / t.ttft_ms
    if t.tpot_ms is not None:
        out["tpot"] = pct([r.tpot_s * 1e3 if r.output_len > 1 else 0.0 for r in records]) / t.tpot_ms
    if t.e2e_ms is not None:
        out["e2e"] = pct([r.e2e_s * 1e3 for r in records]) / t.e2e_ms
    return out


def at_rate(unit: Workload, rate: float) -> Workload:
    """`unit` (arrivals at 1 request/s on average) compressed to `rate` requests/s."""
    reqs = [dataclasses.replace(r, arrival_s=r.arrival_s / rate) for r in unit.requests]
    return dataclasses.replace(unit, requests=reqs, description=f"{unit.description} at {rate:.3g} req/s")


def trial_workload(unit: Workload, rate: float, window: float | None) -> Workload:
    """`unit` at `rate`: all of it without a trial window (meshplan.serving.search.trials), else
    its first requests_for(window, rate) (the same first requests in every trial: common random
    numbers)."""
    if window is not None:
        n = requests_for(window, rate)
        if n < len(unit):
            unit = dataclasses.replace(unit, requests=unit.requests[:n])
    return at_rate(unit, rate)


KEEP_UP_SHARE = 0.97
"""A run keeps up when its steady throughput reaches this share of its arrivals' own rate."""


def keeps_up(result: SimulationResult) -> bool | None:
    """Whether a run took requests into service as fast as they arrived: its steady throughput
    (first tokens over the arrival window, meshplan.serving.metrics.summary) against the
    arrivals' own rate over the same window (a finite sample's rate, not the nominal one). The
    drain after the last arrival does not count. None for a run without an arrival window."""
    steady = result.metrics.steady_requests_per_s
    arrivals = [r.arrival_s for r in result.records]
    if steady is None or len(arrivals) < 2:
        return None
    offered = (len(arrivals) - 1) / (max(arrivals) - min(arrivals))
    return steady >= KEEP_UP_SHARE * offered


UTILIZATION_CAP = 0.95
"""The highest load tried, as a share of the saturated (offline) throughput: a finite run near
or above saturation can still meet percentile SLOs while its queue grows without bound, so
rates above 95% of what the deployment can process at all are never called sustainable."""


def saturated_rate(model: ModelSpec, cluster: Cluster, plan: ServingPlan, unit: Workload,
                   window: float | None = None) -> float:
    """Requests/s the deployment completes with every request queued at once (with a trial
    window, the first MIN_TRIAL_REQUESTS of `unit`: a bigger offline batch only costs time)."""
    reqs = unit.requests[:MIN_TRIAL_REQUESTS] if window is not None else unit.requests
    reqs = [dataclasses.replace(r, arrival_s=0.0) for r in reqs]
    offline = dataclasses.replace(unit, requests=reqs, concurrency=None)
    return simulate(model, cluster, plan, offline).metrics.requests_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Capacity:
    """The highest sustainable rate and what the deployment looks like there."""

    rate: float
    """Requests/s at which every SLO holds (0: not even at a trickle)."""
    margins: dict[str, float]
    """Observed percentile / objective at `rate` (or at the lowest rate tried when 0)."""
    result: SimulationResult | None
    simulations: int
    limited_by: str = ""
    """What stops a higher rate: "throughput" (95% of saturation reached), or the SLO
    (ttft, tpot, e2e) missed just above `rate`."""
    probes: tuple[tuple[float, dict[str, float]], ...] = ()
    """Every rate the search simulated with its margins, by rate: the deployment's
    latency-throughput curve at no extra cost."""
    saturated: float = 0.0
    """Requests/s with every request queued at once (saturated_rate), which bounds the search."""


def capacity(model: ModelSpec, cluster: Cluster, plan: ServingPlan, unit: Workload, t: Targets, *,
             upper: float | None = None, rel_tol: float = 0.03, max_sims: int = 12,
             window: float | None = None, saturated: float | None = None) -> Capacity:
    """Bisect the request rate in (0, min(upper, 95% of saturation)] for the largest one
    meeting `t`; each trial's arrivals span `window` seconds when given (trial_workload).
    `saturated`: the saturated rate when already known (it depends on the first
    MIN_TRIAL_REQUESTS requests only, with or without a window)."""
    probes: dict[float, dict[str, float]] = {}

    def trial(rate: float) -> tuple[bool, dict, SimulationResult]:
        res = simulate(model, cluster, plan, trial_workload(unit, rate, window))
        m = probes[rate] = margins(res.records, t)
        return all(v <= 1.0 for v in m.values()), m, res

    def done(rate: float, m: dict, res: SimulationResult | None, limited_by: str) -> Capacity:
        return Capacity(rate=rate, margins=m, result=res, simulations=sims, limited_by=limited_by,
                        probes=tuple(sorted(probes.items())), saturated=saturated)

    sims = 1 if saturated else 2
    saturated = saturated or saturated_rate(model, cluster, plan, unit, window)
    hi = UTILIZATION_CAP * saturated
    hi = min(hi, upper) if upper else hi
    lo = hi / 64
    ok, m_hi, res_hi = trial(hi)  # first: most plans keep their SLOs up to the cap
    if ok:  # latency only grows with the rate, so every lower rate holds too
        return done(hi, m_hi, res_hi, "throughput")
    ok, m_lo, res_lo = trial(lo)
    sims += 1
    if not ok:
        return done(0.0, m_lo, res_lo, max(m_lo, key=m_lo.get))
    while hi / lo - 1 > rel_tol and sims < max_sims:
        mid = (lo * hi) ** 0.5
        ok, m, res = trial(mid)
        sims += 1
        if ok:
            lo, m_lo, res_lo = mid, m, res
        else:
            hi, m_hi = mid, m
    return done(lo, m_lo, res_lo, max(m_hi, key=m_hi.get))
