"""Figure builders of meshplan.report: each trace's data equals the library's numbers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.report import figures_capacity as fc
from meshplan.report import figures_plan as fp
from meshplan.report import figures_serving as fs
from meshplan.report import figures_training as ft
from meshplan.report import figures_validate as fv
from meshplan.report.trace import chrome_trace
from meshplan.serving.search.capacity import Capacity, Targets
from meshplan.serving.metrics.summary import SLO, summed_over_time
from meshplan.serving.plan import ServingPlan
from meshplan.serving.search.run import SearchResult as ServingSearch
from meshplan.serving.search.candidates import Candidate
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.estimate_report import trace_extras
from meshplan.training.search.plans import search
from meshplan.validate.run import Row

GIB = 2**30


@pytest.fixture(scope="module")
def step():
    spec, cluster = load_model("llama-3.2-1b"), Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(pp=2, global_batch_size=16, micro_batch_size=1, seq_len=2048),
                        spec, cluster)
    return estimate_step(spec, cluster, plan, with_events=True)


@pytest.fixture(scope="module")
def searches():
    spec, base = load_model("llama-3.2-1b"), TrainingPlan(global_batch_size=64, seq_len=2048)
    return {n: search(spec, Cluster.build("h100-sxm-80gb", n), base, {}, top=3) for n in (8, 16)}


@pytest.fixture(scope="module")
def served():
    spec, cluster = load_model("llama-3.2-1b"), Cluster.build("h100-sxm-80gb", 1)
    work = synthesize(WorkloadSpec(arrival="poisson", request_rate=40, num_requests=150, dataset="random",
                                   input_len=512, output_len=64), seed=1)
    first = simulate(spec, cluster, ServingPlan(), work).metrics  # SLOs some requests miss:
    slo = SLO(ttft_ms=first.ttft_ms.p50, tpot_ms=first.tpot_ms.p90)  # the run's own percentiles
    return simulate(spec, cluster, ServingPlan(), work, slo=slo), slo


def traces(fig, name=None):
    return [t for t in fig.data if name is None or t.name == name]


def test_memory_bars_are_the_stage_fields_and_capacity_is_the_gpu(step):
    mem = step.memory
    fig = ft.memory_figure(mem)
    for label, field in ft.MEMORY_PARTS:
        shown = traces(fig, label)
        expected = [getattr(s, field) / GIB for s in mem.stages]
        if any(expected):
            assert list(shown[0].y) == pytest.approx(expected), label
        else:
            assert not shown, label
    heights = np.sum([t.y for t in fig.data], axis=0)
    assert heights == pytest.approx([s.total_bytes / GIB for s in mem.stages])
    assert fig.layout.shapes[0].y0 == pytest.approx(mem.gpu_memory_bytes / GIB)


def test_breakdown_bars_are_the_estimate_breakdown(step):
    bars = ft.breakdown_figure(step).data[0]
    shown = {k: v for k, v in step.breakdown.items() if v > 0}
    assert list(bars.y) == [k.replace("_", " ") for k in shown]
    assert list(bars.x) == pytest.approx(list(shown.values()))
    assert sum(bars.x) == pytest.approx(step.step_time_s)


def test_gantt_draws_every_chrome_trace_event(step):
    trace = chrome_trace(step.pipeline.events, extra=trace_extras(step))
    fig = ft.timeline_figure(step)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sum(len(t.x) for t in fig.data) == len(complete)
    forwards = [e for e in step.pipeline.events if e.kind == "F"]
    f = traces(fig, "F")[0]
    assert list(f.base) == pytest.approx([e.start_s * 1e3 for e in forwards], abs=1e-6)
    assert list(f.x) == pytest.approx([(e.end_s - e.start_s) * 1e3 for e in forwards], abs=1e-6)
    assert set(f.y) == {f"stage {s} compute" for s in range(step.plan.pp)}


def test_pareto_front_keeps_only_undominated_points():
    points = [(8, 100.0), (8, 90.0), (16, 150.0), (16, 180.0), (32, 170.0), (64, 400.0)]
    assert fp.pareto_front(points) == [0, 3, 5]
    assert fp.pareto_front([]) == []


def test_candidates_scatter_ranks_all_sizes_by_score(searches):
    fig = fp.candidates_figure(searches)
    plans = [(n, e, s) for n, r in searches.items() for e, s in zip(r.ranked, r.scores)]
    dots = traces(fig, "plans")[0]
    assert sorted(dots.y) == pytest.approx(sorted(e.tokens_per_s_per_gpu * n for n, e, _ in plans))
    n, best, _ = min(plans, key=lambda p: p[2])
    winner = traces(fig, "winner")[0]
    assert (winner.x[0], winner.y[0]) == (n, pytest.approx(best.tokens_per_s_per_gpu * n))
    front = traces(fig, "Pareto frontier")[0]
    for x, y in zip(front.x, front.y):  # nothing beats a frontier point on both axes
        assert not any(px <= x and py > y for px, py in zip(dots.x, dots.y))


def test_candidates_scatter_prices_plans_when_given_a_price(searches):
    """With a price, x is each plan's USD per million tokens: price x GPUs / total tokens/s."""
    fig = fp.candidates_figure(searches, price_per_gpu_hour=2.5)
    assert fig.layout.xaxis.title.text == "USD per million tokens"
    ranked = fp.ranked_overall(searches)
    dots = traces(fig, "plans")[0]
    want = [2.5 * n / 3600 / (e.tokens_per_s_per_gpu * n) * 1e6 for n, e in ranked]
    assert list(dots.x) == pytest.approx(want)


def test_one_cluster_size_is_plotted_against_memory(searches):
    """One size: every plan has the same GPUs, so x is what they trade, peak memory per GPU."""
    n = min(searches)
    fig = fp.candidates_figure({n: searches[n]})
    assert fig.layout.xaxis.title.text == "peak memory per GPU (GiB)"
    dots = traces(fig, "plans")[0]
    want = [e.memory.peak_stage.allocator_bytes / 2**30 for e in searches[n].ranked]
    assert sorted(dots.x) == pytest.approx(sorted(want))
    assert len(set(dots.x)) > 1


def test_a_long_schedule_draws_its_first_and_last_events_and_marks_the_rest(step):
    trace = chrome_trace(step.pipeline.events, extra=trace_extras(step))
    complete = sorted((e for e in trace["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"])
    limit = len(complete) // 3 * 2  # fewer bars than events: thinned
    fig = ft.gantt_figure(trace, max_bars=limit)
    assert sum(len(t.x) for t in fig.data) == limit // 2 * 2
    starts = sorted(b for t in fig.data for b in t.base)
    want = [e["ts"] / 1e3 for e in complete[:limit // 2] + complete[-(limit // 2):]]
    assert starts == pytest.approx(sorted(want))
    (gap,) = fig.layout.shapes
    assert gap.x0 == pytest.approx(complete[limit // 2]["ts"] / 1e3)
    assert gap.x1 == pytest.approx(complete[-(limit // 2)]["ts"] / 1e3)
    assert f"{len(complete) - limit // 2 * 2:,} of {len(complete):,} events not drawn" in \
        fig.layout.annotations[0].text
    assert ft.gantt_figure(trace, max_bars=len(complete)).layout.shapes == ()


def test_winner_runner_up_bars_and_why_come_from_the_breakdowns(searches):
    (_, a), (_, b) = fp.ranked_overall(searches)[:2]
    fig = fp.comparison_figure(a, b)
    for trace, est in zip(fig.data, (a, b)):
        parts = [k.replace("_", " ") for k in a.breakdown if a.breakdown[k] > 0 or b.breakdown.get(k, 0) > 0]
        assert list(trace.x) == parts
        assert sum(trace.y) == pytest.approx(est.step_time_s)
    text = fp.why_text(searches)
    changed = [k for k in fp.LAYOUT_FIELDS if getattr(a.plan, k) != getattr(b.plan, k)]
    assert all(k.replace("_", " ") in text for k in changed)
    assert f"{(a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu - 1):.1%} faster" in text


def test_sweep_lines_per_model_and_gpu_skip_cells_without_a_plan():
    rows = [{"model": "m", "gpu": "g", "seq_len": 4096, "num_gpus": n, "status": "ok",
             "tokens_per_s_per_gpu": 1000.0 / n, "mfu": 0.4} for n in (16, 8)]
    rows.append({"model": "m", "gpu": "g", "seq_len": 4096, "num_gpus": 4, "status": "nothing fits"})
    (line,) = fp.sweep_figure(rows).data
    assert list(line.x) == [8, 16] and list(line.y) == [125.0, 62.5]


def test_latency_cdfs_are_the_simulated_latencies(served):
    result, slo = served
    fig = fs.latency_cdf_figure(result, slo)
    done = [r for r in result.records if np.isfinite(r.finish_s)]
    assert list(fig.data[0].x) == pytest.approx(sorted(r.ttft_s * 1e3 for r in done))
    assert list(fig.data[2].x) == pytest.approx(sorted(r.e2e_s * 1e3 for r in done))
    assert fig.data[0].y[-1] == 1.0 and len(fig.data[1].x) == sum(r.output_len > 1 for r in done)
    assert np.percentile(fig.data[0].x, 90) == pytest.approx(result.metrics.ttft_ms.p90)
    assert {s.x0 for s in fig.layout.shapes} == {slo.ttft_ms, slo.tpot_ms}


def test_cdf_of_a_large_sample_keeps_its_ends_and_shape():
    values = np.random.default_rng(0).exponential(size=50_001)
    x, y = fs.cdf_points(values, max_points=500)
    assert len(x) == 500 and x[0] == values.min() and x[-1] == values.max() and y[-1] == 1.0
    assert np.interp(0.5, y, x) == pytest.approx(np.median(values), rel=0.02)
    assert fs.cdf_points(np.array([3.0, np.nan, 1.0])) == ([1.0, 3.0], [0.5, 1.0])


def test_activity_over_time_adds_up_to_the_run(served):
    result, _ = served
    fig = fs.activity_figure(result, bins=40)
    tokens, running, waiting, kv = fig.data
    width = tokens.x[1] - tokens.x[0]
    assert sum(tokens.y) * width == pytest.approx(result.metrics.total_output_tokens)
    assert list(running.y) == pytest.approx(summed_over_time(result.log, "num_seqs", 40)[1])
    assert max(waiting.y) <= result.metrics.max_queue_len
    assert all(v is None or 0 <= v <= 1 for v in kv.y)


def test_slo_attainment_matches_goodput(served):
    result, slo = served
    shares = fs.slo_attainment(result, slo)
    m = result.metrics
    assert shares["all"] == pytest.approx(m.goodput_requests_per_s / m.requests_per_s)
    assert 0 < shares["all"] <= 0.5  # TTFT at its own median: about half meet it
    assert shares["all"] <= min(v for k, v in shares.items() if k != "all")
    bars = fs.slo_figure(result, slo, 90).data[0]
    assert list(bars.y) == pytest.approx(list(shares.values()))


def test_serve_sweep_curve_and_slo_lines():
    rows = [{"request_rate": r, "requests_per_s": r * 0.9, "output_tokens_per_s": 100 * r,
             **{f"{k}_ms_{p}": r * i for k in ("ttft", "tpot", "e2e") for i, p in enumerate(("p50", "p90", "p99"), 1)}}
            for r in (1.0, 2.0, 4.0)]
    fig = fc.sweep_curve_figure(rows, Targets(ttft_ms=5.0, e2e_ms=9.0))
    ttft_p90 = [t for t in fig.data if t.name == "TTFT p90"][0]
    assert list(ttft_p90.x) == [0.9, 1.8, 3.6] and list(ttft_p90.y) == [2.0, 4.0, 8.0]
    assert sorted(s.y0 for s in fig.layout.shapes) == [5.0, 9.0]


def test_serve_plan_capacities_and_latencies_come_from_the_candidates():
    cand = Candidate(gpu="h100-sxm-80gb", plan=ServingPlan(), unit_gpus=1, bound_rate=9.0, replicas=2, gpus_per_node=8,
                     capacity=Capacity(rate=5.0, margins={"ttft": 0.8, "tpot": 0.5}, result=None, simulations=4),
                     verified_margins={"ttft": 0.3, "tpot": 0.2})
    result = ServingSearch(ranked=[cand], infeasible=[], rate=8.0, targets=Targets(ttft_ms=200.0, tpot_ms=50.0),
                           objective="min-gpus", prices={}, simulated=1, simulations=4, pruned={}, wall_s=0.1)
    bars = fc.plan_capacity_figure(result)
    assert list(bars.data[0].x) == [10.0] and bars.data[0].orientation == "h"
    # the plan names read level along the y axis (long rotated x labels squashed the chart)
    assert list(bars.data[0].y) == ["#1 tp1 auto on h100-sxm-80gb x2 (2 GPUs)"]  # weights as the checkpoint stores them
    assert bars.layout.yaxis.tickangle == 0 and bars.layout.yaxis.automargin
    ttft, tpot = fc.plan_curves_figure(result).data
    assert list(ttft.x) == [8.0, 10.0] and list(ttft.y) == pytest.approx([60.0, 160.0])
    assert list(tpot.y) == pytest.approx([10.0, 25.0])


def test_serve_plan_curve_runs_through_every_probed_rate():
    """The capacity search's probes draw the plan's latency-throughput curve (x: all replicas)."""
    probes = ((0.5, {"ttft": 0.1, "tpot": 0.2}), (5.0, {"ttft": 0.8, "tpot": 0.5}),
              (7.0, {"ttft": 1.4, "tpot": 0.9}))
    cap = Capacity(rate=5.0, margins={"ttft": 0.8, "tpot": 0.5}, result=None, simulations=4, probes=probes)
    cand = Candidate(gpu="h100-sxm-80gb", plan=ServingPlan(), unit_gpus=1, bound_rate=9.0, replicas=2, gpus_per_node=8,
                     capacity=cap, verified_margins={"ttft": 0.3, "tpot": 0.2})
    result = ServingSearch(ranked=[cand], infeasible=[], rate=8.0, targets=Targets(ttft_ms=200.0, tpot_ms=50.0),
                           objective="min-gpus", prices={}, simulated=1, simulations=4, pruned={}, wall_s=0.1)
    ttft, _ = fc.plan_curves_figure(result).data
    assert list(ttft.x) == [1.0, 8.0, 10.0, 10.0, 14.0]
    assert list(ttft.y) == pytest.approx([20.0, 60.0, 160.0, 160.0, 280.0])
    assert list(ttft.marker.symbol) == ["circle-open", "circle", "circle-open", "x", "circle-open"]


def test_validate_scatter_and_groups():
    rows = [Row("a", "training", "step_time_s", 2.0, 2.2, 0.1),
            Row("b", "training", "tokens_per_s_per_gpu", 1000.0, 900.0, -0.1),
            Row("c", "training", "step_time_s", 4.0, 3.0, -0.25)]
    fig = fv.validate_scatter_figure(rows)
    step = [t for t in fig.data if t.name == "step_time_s"][0]
    assert list(step.x) == [2.0, 4.0] and list(step.y) == [2.2, 3.0]
    band = [t for t in fig.data if t.name == "+10%"][0]
    assert band.y[0] / band.x[0] == pytest.approx(1.1)
    boxes = fv.error_by_group_figure(rows, {"a": "src / h100", "b": "src / h100"}).data
    assert {b.name: list(b.y) for b in boxes} == {"other": [-0.25], "src / h100": [0.1, -0.1]}


def test_report_modules_import_no_plotly_or_jinja2():
    probe = ("import sys, meshplan.report.pages_training, meshplan.report.pages_serving, "
             "meshplan.report.pages_validate, meshplan.cli.html_option; "
             "print([m for m in ('plotly', 'jinja2') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
