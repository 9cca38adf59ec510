"""Capacity trials sized by duration (meshplan.serving.search.trials): a P99 judged on a run whose
arrivals span several request lifetimes, not on 800 requests that all arrive before the batch
has filled (issue #32: serve plan over-promised capacity under a P99 SLO)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.serving.plan import ServingPlan
from meshplan.serving.search.capacity import Targets, at_rate, capacity, margins
from meshplan.serving.search.trials import (
    MAX_TRIAL_REQUESTS, MIN_TRIAL_REQUESTS, WINDOW_LIFETIMES, lifetime_s, requests_for, sized_unit, window_s,
)
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

runner = CliRunner()


def unit(n: int, **lengths):
    lengths = lengths or {"dataset": "random", "input_len": 128, "output_len": 1024, "range_ratio": 0.5}
    return synthesize(WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=n, **lengths), seed=0)


def test_the_lifetime_is_the_slowest_a_request_meeting_the_slos_lives():
    u = unit(200, dataset="fixed", input_len=100, output_len=300)
    assert lifetime_s(u, Targets(ttft_ms=1000, tpot_ms=20)) == pytest.approx(1.0 + 300 * 0.020)
    assert lifetime_s(u, Targets(ttft_ms=1000, tpot_ms=20, e2e_ms=4000)) == pytest.approx(4.0)
    assert lifetime_s(u, Targets(ttft_ms=1000)) is None  # nothing bounds the decode: no window
    assert window_s(u, Targets(tpot_ms=20)) == pytest.approx(WINDOW_LIFETIMES * 6.0)


def test_requests_per_trial_follow_the_rate_within_bounds():
    assert requests_for(60.0, 1.0) == MIN_TRIAL_REQUESTS
    assert requests_for(60.0, 50.0) == 3000
    assert requests_for(60.0, 1e4) == MAX_TRIAL_REQUESTS


def test_an_explicit_request_count_keeps_the_fixed_trials():
    made = []

    def make(n):
        made.append(n)
        return unit(n), 50.0

    u, rate, window = sized_unit(make, Targets(tpot_ms=10), 300)
    assert (len(u), rate, window, made) == (300, 50.0, None, [300])
    u, rate, window = sized_unit(make, Targets(tpot_ms=10), None)
    first = unit(MIN_TRIAL_REQUESTS)  # the window comes from a first unit of the fewest requests
    assert window == pytest.approx(WINDOW_LIFETIMES * lifetime_s(first, Targets(tpot_ms=10)))
    assert len(u) == requests_for(window, 50.0) > MIN_TRIAL_REQUESTS


def test_a_p99_that_only_800_requests_meet_no_longer_passes():
    """llama-3.1-8b, tp2 on B200, long outputs, P99 TPOT 10 ms: 800 requests at ~28 req/s arrive
    in ~28 s, about 2 request lifetimes, so the batch never reaches its steady size and the
    trial's P99 reads light early batches. A run 5x longer at that rate misses the SLO."""
    model, cluster, plan = load_model("llama-3.1-8b"), Cluster.build("b200-180gb", 2), ServingPlan(tp=2)
    t = Targets(tpot_ms=10, percentile=99)
    long = unit(4000)
    window = window_s(long, t)
    old = capacity(model, cluster, plan, dataclasses.replace(long, requests=long.requests[:800]), t)
    new = capacity(model, cluster, plan, long, t, window=window)
    assert old.limited_by == "tpot" and old.margins["tpot"] <= 1
    assert margins(simulate(model, cluster, plan, at_rate(long, old.rate)).records, t)["tpot"] > 1.1
    assert new.rate < 0.95 * old.rate
    assert requests_for(window, new.rate) > 800  # its trials spanned the window


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


PLAN = ("serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--slo-ttft-ms", 1000,
        "--slo-tpot-ms", 40, "--no-disaggregation", "--workers", 1, "--top", 1, "--json")


def test_a_low_rate_search_is_unchanged():
    """At 2 req/s the window needs fewer than 800 requests: the default search is the old one."""
    sized, fixed = run(*PLAN, "--request-rate", 2), run(*PLAN, "--request-rate", 2, "--num-requests", 800)
    assert sized.exit_code == fixed.exit_code == 0, sized.output + fixed.output
    sized, fixed = json.loads(sized.stdout), json.loads(fixed.stdout)
    assert sized["plans"] == fixed["plans"] and sized["workload"]["num_requests"] == 800
    assert sized["search"]["requests_per_trial"] == {"min": 800, "max": 800}
    assert sized["search"]["trial_window_s"] > 0 and fixed["search"]["trial_window_s"] is None


def test_a_sized_plan_resimulates_with_the_same_numbers(tmp_path):
    out = run(*PLAN, "--request-rate", 20)
    assert out.exit_code == 0, out.output
    found = json.loads(out.stdout)
    n = found["workload"]["num_requests"]
    assert found["search"]["requests_per_trial"]["max"] == n > 800
    assert found["search"]["warm_up_excluded_requests"] == 0
    path = tmp_path / "plan.json"
    path.write_text(out.stdout)
    sim = run("serve", "simulate", "--plan", path, "--json")
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)["metrics"] == found["plans"][0]["metrics"]
    assert json.loads(sim.stdout)["metrics"]["completed"] == n
