"""Screening in `serve plan` (meshplan.serving.search.screening): candidates are bisected with
short trials and only the plans whose place matters are re-bisected with trials sized by duration,
so the search is fast again with the answers of sizing every candidate."""

from __future__ import annotations

from meshplan import Cluster, load_model
from meshplan.serving.plan import ServingPlan
from meshplan.serving.search import screening
from meshplan.serving.search.candidates import Candidate, Space
from meshplan.serving.search.capacity import Capacity, Targets
from meshplan.serving.search.run import search
from meshplan.serving.search.trials import MIN_TRIAL_REQUESTS, sized_unit
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

T = Targets(ttft_ms=2000, tpot_ms=100)  # loose: capacities are throughput-limited, short == sized


def make(n: int):
    return synthesize(WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=n, dataset="sharegpt"),
                      seed=0), 20.0


def run_search(monkeypatch, sizes: list[int]):
    real = screening._job

    def counted(args):
        sizes.append(len(args[3]))
        return real(args)
    monkeypatch.setattr(screening, "_job", counted)
    unit, rate, window = sized_unit(make, T, None)
    return search(load_model("llama-3.1-8b"), [Cluster.build("h100-sxm-80gb", 8)], unit, rate, T, max_gpus=8,
                  workers=1, top=1, space=Space(disaggregate=False), window=window)


def answer(r) -> list:
    return [(c.plan, c.replicas, c.capacity.rate, c.capacity.probes, c.capacity.limited_by, c.verified_margins)
            for c in r.ranked]


def test_screening_gives_the_plans_of_sizing_every_candidate(monkeypatch):
    screened_sizes, all_sizes = [], []
    screened = run_search(monkeypatch, screened_sizes)
    monkeypatch.setattr(screening, "MIN_TRIAL_REQUESTS", 10**9)  # no unit is longer: every trial sized
    every = run_search(monkeypatch, all_sizes)
    assert screened.ranked and answer(screened) == answer(every)
    assert screened.simulated == every.simulated  # pruning compares sized scores only
    sized = max(all_sizes)
    assert sized > MIN_TRIAL_REQUESTS and set(all_sizes) == {sized}
    assert MIN_TRIAL_REQUESTS in screened_sizes  # candidates were screened with short trials


def fake_candidate(tp: int) -> Candidate:
    return Candidate(gpu="h100-sxm-80gb", plan=ServingPlan(tp=tp), unit_gpus=tp, bound_rate=100.0, gpus_per_node=8)


def fake_jobs(monkeypatch, sized_share: float) -> None:
    """Capacity 10 x tp req/s from a short trial, `sized_share` of it from a sized one."""
    def job(args):
        short = len(args[3]) == MIN_TRIAL_REQUESTS
        rate = 10.0 * args[2].tp * (1.0 if short else sized_share)
        return Capacity(rate=rate, margins={"tpot": 0.9}, result=None, simulations=1)
    monkeypatch.setattr(screening, "_job", job)
    monkeypatch.setattr(screening, "job_args", lambda model, cluster, plan, unit, *rest: (model, None, plan, unit))


def test_only_the_plans_whose_place_matters_are_sized(monkeypatch):
    fake_jobs(monkeypatch, 0.99)
    unit, rate, window = sized_unit(make, T, None)
    s = screening.Screening(None, {"h100-sxm-80gb": None}, unit, rate, T, window, None)
    cands = [fake_candidate(tp) for tp in (1, 2, 4, 8)]
    s.screen(cands)
    s.settle(cands, lambda cs: sorted(cs, key=lambda c: -c.capacity.rate)[:2])  # the best two by capacity
    assert [s.is_sized(c) for c in cands] == [False, False, True, True] and s.agrees
    assert [c.capacity.rate for c in cands] == [10.0, 20.0, 40.0 * 0.99, 80.0 * 0.99]


def test_screening_stops_once_short_trials_over_promise(monkeypatch):
    """A sized capacity well below its short one (a P99 judged during warm-up): screening the
    rest would simulate most plans twice, so later candidates are sized at once."""
    fake_jobs(monkeypatch, 0.5)
    unit, rate, window = sized_unit(make, T, None)
    s = screening.Screening(None, {"h100-sxm-80gb": None}, unit, rate, T, window, None)
    first, second = fake_candidate(1), fake_candidate(1)
    s.screen([first])
    assert not s.is_sized(first) and first.capacity.rate == 10.0 and s.agrees
    assert s.size([first]) and first.capacity.rate == 5.0 and not s.agrees
    s.screen([second])
    assert s.is_sized(second) and second.capacity.rate == 5.0
    assert not s.size([first, second])  # nothing left to size


def test_a_unit_no_longer_than_a_short_trial_is_not_screened():
    unit, rate = make(MIN_TRIAL_REQUESTS)
    s = screening.Screening(None, {}, unit, rate, T, 60.0, None)
    assert not s.screens and s.is_sized(fake_candidate(1))
    assert s.short_unit is unit
