"""Screen candidates with short capacity trials, size only the ones that can change the answer.

A capacity trial sized by duration (meshplan.serving.search.trials) costs up to 20x a trial of the
first MIN_TRIAL_REQUESTS requests. The short trial judges its percentiles on a batch still
filling from empty, which only flatters: its capacity is an upper bound of the sized one, so a
plan's score from it (fewer replicas, more goodput per GPU) is a lower bound of its real score.

The search therefore bisects every candidate's capacity with short trials and re-runs the sized
capacity search (the same bisection the search would run without screening: same rates, same
answer) only for the candidates whose place matters: the ones that rank in the best `top` or
lead their precision class, until every candidate in those places is sized. An unsized one then
ranks at best where its optimistic score puts it, behind all of them, and the sized ones ahead of
it keep their places. Pruning compares against sized scores only, so the same candidates are
simulated as without screening.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from meshplan.serving.search.bounds import replicas_needed
from meshplan.serving.search.candidates import Candidate, _job, job_args, whole_replicas
from meshplan.serving.search.trials import MIN_TRIAL_REQUESTS
from meshplan.serving.traffic.workload import Workload

AGREEMENT = 0.03
"""Relative shortfall of a sized capacity below its screened one (the bisection's own tolerance)
beyond which screening stops for the rest of a search."""


class Screening:
    """Short trials first, sized trials on demand, for one search (`pool`: a process pool or None)."""

    def __init__(self, model, clusters: dict, unit: Workload, rate: float, t, window: float | None, pool) -> None:
        self.model, self.clusters, self.unit, self.rate, self.t = model, clusters, unit, rate, t
        self.window, self.pool = window, pool
        short = window is not None and len(unit) > MIN_TRIAL_REQUESTS
        self.short_unit = (dataclasses.replace(unit, requests=unit.requests[:MIN_TRIAL_REQUESTS])
                           if short else unit)
        self.short_window = None if short else window
        self.screens = short
        """Whether short trials differ from sized ones (else every capacity is sized at once)."""
        self.agrees = True
        """False once a sized capacity fell short of its screened one by more than AGREEMENT:
        short trials over-promise in this search (a P99 SLO judged during warm-up), most plans
        would be simulated twice, so the rest are sized at once."""
        self.screened: set[int] = set()
        self.sized: set[int] = set()
        self.simulations = 0

    def is_sized(self, c: Candidate) -> bool:
        """Whether `c`'s capacity is the sized one (or never came from a simulation)."""
        return not self.screens or id(c) not in self.screened or id(c) in self.sized

    def _submit(self, batch: list[Candidate], unit: Workload, window: float | None) -> Callable[[], None]:
        """Start the capacity searches of `batch` (in the pool when there is one; a known saturated
        rate is not simulated again); the returned function waits for them and stores them."""
        jobs = [job_args(self.model, self.clusters[c.gpu], c.plan, unit, self.t, None, window,
                         (c.capacity.saturated or None) if c.capacity else None) for c in batch]
        results = self.pool.map(_job, jobs) if self.pool else map(_job, jobs)

        def finish() -> None:
            for c, cap in zip(batch, results):
                c.capacity = cap
                c.replicas = whole_replicas(c, replicas_needed(self.rate, cap.rate))
                self.simulations += cap.simulations
        return finish

    def screen(self, batch: list[Candidate]) -> None:
        """Capacity of `batch` from short trials; sized ones when screening does not apply, or no
        longer pays (`agrees`)."""
        if not self.agrees:
            self._submit(batch, self.unit, self.window)()
            return
        self._submit(batch, self.short_unit, self.short_window)()
        self.screened.update(id(c) for c in batch)

    def size(self, cands: Iterable[Candidate]) -> bool:
        """Re-run the sized capacity search of the unsized ones of `cands`; whether any was."""
        todo = list({id(c): c for c in cands if not self.is_sized(c)}.values())
        short = [c.capacity.rate for c in todo]
        self._submit(todo, self.unit, self.window)()
        self.sized.update(id(c) for c in todo)
        if any(c.capacity.rate < (1 - AGREEMENT) * r for c, r in zip(todo, short)):
            self.agrees = False
        return bool(todo)

    def settle(self, cands: list[Candidate], places: Callable[[list[Candidate]], list[Candidate]]) -> None:
        """Size candidates until `places(cands)` (the ones whose place matters, from the current
        scores) are all sized: sizing only lowers a score, so the loop ends."""
        while self.size(places(cands)):
            pass
