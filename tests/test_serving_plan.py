"""Serving plan search: capacity by bisection, the analytical bounds that prune it, the ranked
search, and `meshplan serve plan | sweep | export` on the command line.

Everything runs llama-3.1-8b on H100s with a few hundred simulated requests, so the file
stays within a few tens of seconds on two cores. The simulator is deterministic: same workload,
same plan, same numbers.
"""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

import meshplan
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.search.bounds import replica_bounds, uncached_input_tokens
from meshplan.serving.search.capacity import (
    UTILIZATION_CAP, Targets, at_rate, capacity, margins, saturated_rate,
)
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.plan import ServingPlan
from meshplan.serving.search.report import render, result_dict
from meshplan.serving.search.run import deployment_plan, search
from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.search.candidates import OBJECTIVES, Space, score
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

GPU = "h100-sxm-80gb"
SPACE = Space(tps=(1, 2), budgets=(None,), quantize=False, disaggregate=True)
"""2 colocated candidates (tp1, tp2) and 4 prefill/decode pairs of them."""
SEARCH_SLO = Targets(ttft_ms=1000, tpot_ms=30)


@pytest.fixture(scope="module")
def model():
    return meshplan.load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def unit():
    """200 requests of 512 + 64 tokens, Poisson arrivals at 1 request/s on average."""
    spec = WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=200, dataset="fixed",
                        input_len=512, output_len=64)
    return synthesize(spec, seed=0)


def cluster(n: int = 1):
    return meshplan.Cluster.build(GPU, n)


def worst(m: dict[str, float]) -> float:
    return max(m.values())


def bounds_of(model, plan: ServingPlan, workload, t: Targets, mean_in: float | None = None):
    """The analytical bounds of one replica of `plan`, as the search computes them."""
    c = cluster(plan.num_gpus)
    (pool,) = resolve_pools(model, c, plan, workload)
    (replica,) = build_replicas(model, c, pool, workload, IterationLog(), 0)
    mean_in = uncached_input_tokens(workload) if mean_in is None else mean_in
    return replica_bounds(pool, replica.cost, mean_in, workload.total_output_tokens / len(workload), t)


# --- capacity -------------------------------------------------------------------------------

def test_targets_need_an_slo_and_a_valid_percentile():
    with pytest.raises(ConfigError, match="--slo-ttft-ms"):
        Targets()
    with pytest.raises(ConfigError, match="--slo-percentile 0"):
        Targets(ttft_ms=100, percentile=0)
    assert Targets(ttft_ms=2000, tpot_ms=100).label() == "P90 TTFT <= 2000 ms, P90 TPOT <= 100 ms"


def test_margins_are_percentile_over_objective():
    def record(i: int, ttft: float, out: int) -> RequestRecord:
        return RequestRecord(id=i, arrival_s=0.0, input_len=10, output_len=out, first_token_s=ttft,
                             finish_s=ttft + 0.01 * (out - 1))
    records = [record(i, (i + 1) / 10, 11) for i in range(10)] + [record(10, 0.5, 1)]
    m = margins(records, Targets(ttft_ms=1000, tpot_ms=20, e2e_ms=2000, percentile=100))
    assert m["ttft"] == pytest.approx(1.0)  # the slowest first token: 1 s
    assert m["tpot"] == pytest.approx(0.5)  # 10 ms per token; a 1-token request counts as 0
    assert m["e2e"] == pytest.approx((1.0 + 0.1) / 2)
    assert set(margins(records, Targets(tpot_ms=5))) == {"tpot"}


def test_at_rate_keeps_lengths_and_scales_arrivals_exactly(unit):
    span = unit.requests[-1].arrival_s - unit.requests[0].arrival_s
    assert (len(unit) - 1) / span == pytest.approx(1.0, rel=0.2)  # a unit workload: ~1 req/s
    fast = at_rate(unit, 8.0)
    assert len(fast) == len(unit) and "at 8 req/s" in fast.description
    for a, b in zip(unit.requests, fast.requests):
        assert (b.id, b.input_len, b.output_len, b.prefix_hashes) == (a.id, a.input_len, a.output_len,
                                                                      a.prefix_hashes)
        assert b.arrival_s == a.arrival_s / 8.0
    assert fast.total_input_tokens == unit.total_input_tokens == 200 * 512
    assert unit.requests[-1].arrival_s == pytest.approx(span)  # the unit itself is untouched
    assert [r.arrival_s for r in at_rate(unit, 1.0).requests] == [r.arrival_s for r in unit.requests]


def test_capacity_meets_the_targets_and_30_percent_more_does_not(model, unit):
    t = Targets(ttft_ms=2000, tpot_ms=15)
    cap = capacity(model, cluster(), ServingPlan(), unit, t)
    sat = saturated_rate(model, cluster(), ServingPlan(), unit)
    assert 0 < cap.rate <= UTILIZATION_CAP * sat
    assert worst(cap.margins) <= 1
    assert 3 <= cap.simulations <= 12
    # the run kept at capacity is the run at that rate, and it is reproducible
    rerun = simulate(model, cluster(), ServingPlan(), at_rate(unit, cap.rate))
    assert margins(rerun.records, t) == pytest.approx(cap.margins)
    assert margins(cap.result.records, t) == pytest.approx(cap.margins)
    higher = 1.3 * cap.rate
    assert higher > UTILIZATION_CAP * sat or worst(margins(
        simulate(model, cluster(), ServingPlan(), at_rate(unit, higher)).records, t)) > 1
    assert higher <= UTILIZATION_CAP * sat  # here it is TPOT that binds, not saturation
    # every simulated rate but saturation is kept, by rate, with its margins: the curve
    rates = [r for r, _ in cap.probes]
    assert rates == sorted(rates) and len(rates) == cap.simulations - 1
    assert dict(cap.probes)[cap.rate] == cap.margins
    assert all(worst(m) <= 1 for r, m in cap.probes if r <= cap.rate)
    assert all(worst(m) > 1 for r, m in cap.probes if r > cap.rate)


def test_loose_targets_stop_at_the_saturation_cap(model, unit):
    t = Targets(ttft_ms=10_000, tpot_ms=1000)
    cap = capacity(model, cluster(), ServingPlan(), unit, t)
    sat = saturated_rate(model, cluster(), ServingPlan(), unit)
    assert cap.rate == pytest.approx(UTILIZATION_CAP * sat)
    assert cap.simulations == 2  # saturation and the cap (it holds, so every lower rate does)
    assert capacity(model, cluster(), ServingPlan(), unit, t, upper=5.0).rate == pytest.approx(5.0)


def test_capacity_is_monotone_in_the_objectives(model, unit):
    rates = [capacity(model, cluster(), ServingPlan(), unit, Targets(ttft_ms=2000, tpot_ms=tpot)).rate
             for tpot in (9, 12, 15, 20, 30)]
    assert rates == sorted(rates) and rates[0] < rates[-1], rates
    by_percentile = [capacity(model, cluster(), ServingPlan(), unit, Targets(tpot_ms=12, percentile=p)).rate
                     for p in (99, 90, 50)]
    assert by_percentile == sorted(by_percentile), by_percentile


def test_impossible_objective_gives_rate_zero(model, unit):
    cap = capacity(model, cluster(), ServingPlan(), unit, Targets(ttft_ms=2000, tpot_ms=0.1))
    assert cap.rate == 0
    assert cap.margins["tpot"] > 1 and cap.margins["ttft"] <= 1
    assert cap.result is not None and cap.simulations == 3  # saturation, the cap, the lowest rate


# --- bounds ---------------------------------------------------------------------------------

@pytest.mark.parametrize("plan, t", [
    (ServingPlan(), Targets(ttft_ms=2000, tpot_ms=15)),
    (ServingPlan(tp=2), Targets(ttft_ms=2000, tpot_ms=50)),
    (ServingPlan(max_num_batched_tokens=2048), Targets(ttft_ms=500)),
], ids=["tp1-tpot15", "tp2-tpot50", "budget2048-ttft500"])
def test_max_rate_bounds_the_simulated_capacity(model, unit, plan, t):
    b = bounds_of(model, plan, unit, t)
    cap = capacity(model, cluster(plan.num_gpus), plan, unit, t)
    assert cap.rate > 0
    assert b.max_rate >= cap.rate, (b.max_rate, cap.rate)
    assert b.max_rate == pytest.approx(min(b.prefill_rate, b.decode_rate))


@pytest.mark.parametrize("plan", [ServingPlan(), ServingPlan(tp=2),
                                  ServingPlan(max_num_batched_tokens=256, max_num_seqs=64)],
                         ids=["tp1", "tp2", "chunked-256"])
def test_lone_request_bounds_match_a_concurrency_1_run(model, plan):
    alone = synthesize(WorkloadSpec(arrival="concurrency", concurrency=1, num_requests=4, dataset="fixed",
                                    input_len=512, output_len=64))
    b = bounds_of(model, plan, alone, Targets(ttft_ms=1000))
    res = simulate(model, cluster(plan.num_gpus), plan, alone)
    for r in res.records:
        assert r.ttft_s * 1e3 == pytest.approx(b.ttft_ms, rel=0.03)
        assert r.tpot_s * 1e3 == pytest.approx(b.tpot_ms, rel=0.03)


def test_bounds_count_shared_prefixes_as_cached(model):
    """Regression: with a shared system prompt the lone-request TTFT bound used the whole
    prompt, so plans that prefix caching makes fast enough were pruned ('No plan')."""
    spec = WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=100, dataset="fixed",
                        input_len=100, output_len=64, shared_prefix_len=3000)
    shared = synthesize(spec, seed=0)
    assert uncached_input_tokens(shared) < 0.1 * shared.total_input_tokens / len(shared)
    plain = synthesize(spec.model_copy(update={"shared_prefix_len": 0}), seed=0)
    assert uncached_input_tokens(plain) == plain.total_input_tokens / len(plain)
    full_prompt_ttft = bounds_of(model, ServingPlan(), shared, Targets(ttft_ms=1), mean_in=3100).ttft_ms
    t = Targets(ttft_ms=0.8 * full_prompt_ttft)  # below a cold 3,100-token prefill
    assert capacity(model, cluster(), ServingPlan(), shared, t).rate > 0
    only_bf16 = Space(tps=(1,), budgets=(None,), quantize=False, disaggregate=False)
    r = search(model, [cluster()], shared, 5.0, t, max_gpus=1, space=only_bf16, workers=1)
    assert [c.plan.tp for c in r.ranked] == [1], r.pruned
    assert worst(r.ranked[0].verified_margins) <= 1


# --- search ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def found(model, unit):
    return search(model, [cluster(2)], unit, 20.0, SEARCH_SLO, max_gpus=2, space=SPACE, workers=1)


def test_search_ranks_plans_that_meet_the_slos(found):
    assert found.ranked and found.objective == "min-gpus" and found.rate == 20.0
    keys = [score(c, "min-gpus", None) for c in found.ranked]
    assert keys == sorted(keys)
    assert [c.gpus for c in found.ranked] == sorted(c.gpus for c in found.ranked)
    assert found.ranked[0].gpus == 1
    for c in found.ranked:
        assert c.gpus <= 2 and c.replicas >= 1
        assert c.capacity.rate * c.replicas >= found.rate
        assert c.verified is not None and c.verified.metrics.completed == 200
        assert margins(c.verified.records, SEARCH_SLO) == pytest.approx(c.verified_margins)
        assert worst(c.verified_margins) <= 1, c.plan
        assert deployment_plan(c).num_gpus == c.gpus
        assert sum(p.replicas * p.plan.gpus_per_replica for p in c.verified.pools) == c.gpus
    assert any(c.disaggregated for c in found.ranked)


def test_search_accounts_for_every_candidate(found):
    assert found.simulated == len(found.ranked) + len(found.infeasible)
    assert found.simulations >= 2 * found.simulated  # each: saturation and the rate cap, at least
    assert found.pruned or found.simulated == 6
    assert found.simulated + sum(found.pruned.values()) == 2 + 2 * 2  # colocated + pairs
    assert all(n > 0 and (k.startswith("bound: ") or k == "does not fit in memory")
               for k, n in found.pruned.items())


def test_search_adds_replicas_when_one_is_not_enough(model, unit):
    r = search(model, [cluster(2)], unit, 80.0, SEARCH_SLO, max_gpus=2, space=SPACE, workers=1)
    tp1 = next(c for c in r.ranked if not c.disaggregated and c.plan.tp == 1)
    assert tp1.replicas == 2 and tp1.gpus == 2 and deployment_plan(tp1).replicas == 2
    assert all(worst(c.verified_margins) <= 1 and c.gpus <= 2 for c in r.ranked)


def test_max_goodput_per_gpu_orders_by_goodput_per_gpu(model, unit):
    r = search(model, [cluster(2)], unit, 20.0, SEARCH_SLO, max_gpus=2, space=SPACE, workers=1,
               objective="max-goodput-per-gpu")
    per_gpu = [c.goodput_per_gpu() for c in r.ranked]
    assert len(per_gpu) >= 2 and per_gpu == sorted(per_gpu, reverse=True)


def test_min_cost_needs_prices_and_reports_cost(model, unit):
    with pytest.raises(ConfigError, match="--price"):
        search(model, [cluster(2)], unit, 20.0, SEARCH_SLO, max_gpus=2, space=SPACE, objective="min-cost")
    colocated_only = Space(tps=(1, 2), budgets=(None,), quantize=False, disaggregate=False)
    r = search(model, [cluster(2)], unit, 20.0, SEARCH_SLO, max_gpus=2, space=colocated_only, workers=1,
               objective="min-cost", prices={GPU: 2.5})
    costs = [c.gpus * 2.5 for c in r.ranked]
    assert costs == sorted(costs)
    first = result_dict(r, "llama-3.1-8b")["plans"][0]
    assert first["cost_per_million_output_tokens"] > 0


def test_unknown_objective_lists_the_valid_ones(model, unit):
    with pytest.raises(ConfigError) as exc:
        search(model, [cluster(2)], unit, 20.0, SEARCH_SLO, max_gpus=2, space=SPACE, objective="fastest")
    assert "'fastest'" in str(exc.value) and all(o in str(exc.value) for o in OBJECTIVES)


def test_slo_no_plan_meets_even_alone_is_pruned_without_simulating(model, unit):
    r = search(model, [cluster(2)], unit, 20.0, Targets(ttft_ms=1, tpot_ms=30), max_gpus=2, space=SPACE,
               workers=1)
    assert r.ranked == [] and r.simulated == 0
    # tp1 and tp2 (and, as the search then also tries deeper pipelines, tp1 x pp2)
    assert set(r.pruned) == {"bound: a lone request already misses an SLO"}
    assert r.pruned["bound: a lone request already misses an SLO"] >= 2
    assert "No plan serves 20 req/s" in _text(render(r))


def test_infeasible_plans_report_their_misses(model, unit):
    # No bound checks E2E, so these plans are simulated and miss it even at a trickle.
    r = search(model, [cluster(2)], unit, 20.0, Targets(e2e_ms=10), max_gpus=2, space=SPACE, workers=1)
    assert r.ranked == [] and r.infeasible
    for c in r.infeasible:
        assert c.capacity.rate == 0 and c.capacity.margins["e2e"] > 1
    data = result_dict(r, "llama-3.1-8b")
    assert data["plans"] == [] and all(i["misses"]["E2E"] > 0 for i in data["infeasible"])
    assert all(i["reason"].startswith("misses P90 E2E by +") and i["reason"].endswith("even at a trickle")
               for i in data["infeasible"])  # what the text says, in the JSON too
    text = _text(render(r))
    assert "No plan serves 20 req/s within P90 E2E <= 10 ms" in text and "even at a trickle" in text


def test_a_rate_beyond_max_gpus_needs_more_gpus(model, unit):
    r = search(model, [cluster(2)], unit, 150.0, SEARCH_SLO, max_gpus=2, space=SPACE, workers=1)
    assert r.ranked == [] and r.infeasible
    assert all(c.capacity.rate > 0 and c.gpus > 2 for c in r.infeasible)
    assert "needs more GPUs" in _text(render(r))


def test_report_json_and_text(found):
    data = result_dict(found, "llama-3.1-8b")
    assert data["slo"] == SEARCH_SLO.label() and data["objective"] == "min-gpus"
    assert len(data["plans"]) == len(found.ranked)
    first = data["plans"][0]
    assert first["gpus"] == 1 and first["layout"] == "tp1 bf16"
    assert ServingPlan(**first["plan"]).num_gpus == first["gpus"]
    assert first["metrics"]["completed"] == 200 and first["cost_per_million_output_tokens"] is None
    assert data["search"]["pruned_total"] == sum(found.pruned.values())
    json.dumps(data)  # plain data only
    text = _text(render(found))
    assert "20 req/s within P90 TTFT <= 1000 ms, P90 TPOT <= 30 ms (min-gpus)" in text
    assert "tp1 bf16 on h100-sxm-80gb wins" in text and "simulated 3 plans" in text


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


# --- CLI ------------------------------------------------------------------------------------

runner = CliRunner()
PLAN = ("serve", "plan", "--model", "llama-3.1-8b", "--gpu", GPU, "--request-rate", "5", "--max-gpus", "1",
        "--num-requests", "150", "--workers", "1", "--no-disaggregation")
SLOS = ("--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")
SWEEP = ("serve", "sweep", "--model", "llama-3.1-8b", "--gpu", GPU, "--num-requests", "100")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    result = run(*PLAN, *SLOS, "--json")
    assert result.exit_code == 0, result.output
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(result.stdout)
    return path


def test_cli_plan_json(plan_json):
    data = json.loads(plan_json.read_text())
    assert data["model"] == "llama-3.1-8b" and data["request_rate"] == 5.0
    first = data["plans"][0]
    assert first["gpus"] == 1 and first["plan"]["tp"] == 1 and first["plan"]["disaggregated"] is None
    assert first["capacity_requests_per_s"] >= 5.0
    assert first["metrics"]["completed"] == 150 and first["metrics"]["ttft_ms"]["p90"] <= 2000
    assert first["metrics"]["tpot_ms"]["p90"] <= 100 and max(first["slo_margins"].values()) <= 1
    curve = first["capacity_curve"]  # the capacity search's probes, as the HTML curve draws them
    assert curve and curve == sorted(curve, key=lambda p: p["requests_per_s"])
    at_capacity = [p for p in curve if p["requests_per_s"] == first["capacity_requests_per_s"]]
    assert at_capacity and max(at_capacity[0]["slo_margins"].values()) <= 1
    search_stats = data["search"]
    assert search_stats["simulated_plans"] >= 1 and isinstance(search_stats["pruned"], dict)


@pytest.mark.parametrize("target, line", [("vllm", "vllm serve meta-llama/"),
                                          ("sglang", "python -m sglang.launch_server")])
def test_cli_export_reads_the_plan_json(plan_json, target, line):
    result = run("serve", "export", "--target", target, "--plan", plan_json)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#!/usr/bin/env bash") and line in result.stdout


def test_cli_plan_without_a_plan_exits_1():
    result = run(*PLAN, "--slo-ttft-ms", "1")
    assert result.exit_code == 1, result.output
    assert "No plan serves 5 req/s" in result.stdout


def test_cli_plan_table():
    result = run(*PLAN, *SLOS, "--no-quantization")
    assert result.exit_code == 0, result.output
    assert "5 req/s within" in result.stdout and "tp1 bf16 on h100-sxm-80gb wins" in result.stdout


@pytest.mark.parametrize("args, words", [
    ((*PLAN,), ("--slo-ttft-ms",)),
    ((*PLAN, *SLOS, "--objective", "min-cost", "--price", "h100"), ("--price 'h100'", "GPU=USD_PER_GPU_HOUR")),
    ((*PLAN, *SLOS, "--objective", "fastest"), ("'fastest'", *OBJECTIVES)),
    ((*PLAN, *SLOS, "--objective", "min-cost"), ("--price",)),
], ids=["no-slo", "price-without-equals", "unknown-objective", "min-cost-without-price"])
def test_cli_plan_bad_input_exits_2(args, words):
    one_error(run(*args), *words)


def test_cli_export_bad_plan_files_exit_2(tmp_path):
    one_error(run("serve", "export", "--target", "vllm", "--plan", tmp_path / "missing.json"), "does not exist")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"model": "llama-3.1-8b", "plans": []}))
    one_error(run("serve", "export", "--target", "vllm", "--plan", empty), "holds no plan to export")


def test_cli_sweep_prints_and_writes_csv(tmp_path):
    out = tmp_path / "out.csv"
    result = run(*SWEEP, "--rates", "1,4", "--csv", out)
    assert result.exit_code == 0, result.output
    assert "latency vs request rate" in result.stdout
    rows = list(csv.DictReader(out.open()))
    assert [float(r["request_rate"]) for r in rows] == [1.0, 4.0]
    for r in rows:
        assert float(r["ttft_ms_p50"]) <= float(r["ttft_ms_p90"]) <= float(r["ttft_ms_p99"])
        assert 0 < float(r["tpot_ms_p90"]) and float(r["requests_per_s"]) > 0
    assert float(rows[1]["requests_per_s"]) > float(rows[0]["requests_per_s"])


@pytest.mark.parametrize("rates, words", [("0", ("--rates 0.0", "0.001 requests/s or more")), ("a,b", ("--rates 'a,b'",))])
def test_cli_sweep_bad_rates_exit_2(rates, words):
    one_error(run(*SWEEP, "--rates", rates), *words)
