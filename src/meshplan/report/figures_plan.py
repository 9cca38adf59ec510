"""Figures of a training plan search (`train plan`) and of a sweep (`train sweep`).

The search results come keyed by GPU count (one `SearchResult` per cluster size searched); plans
of every size are ranked together by their objective score (lower is better, as in the search).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from meshplan.report.viz import graph_objects
from meshplan.training.search.economics import economics
from meshplan.training.estimate import StepEstimate
from meshplan.training.search.plans import SearchResult, why_better


def ranked_overall(results: Mapping[int, SearchResult]) -> list[tuple[int, StepEstimate]]:
    """(GPU count, plan) of every ranked plan of every size, best score first."""
    scored = [(score, n, est) for n, r in results.items() for est, score in zip(r.ranked, r.scores)]
    scored.sort(key=lambda item: item[0])
    return [(n, est) for _, n, est in scored]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: none with lower-or-equal x (GPUs, cost or
    memory) and higher-or-equal throughput (y), better in one. Sorted by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _label(n: int, est: StepEstimate) -> str:
    p = est.plan
    return (f"{n} GPUs: tp{p.tp} pp{p.pp} vpp{p.vpp} cp{p.cp} ep{p.ep} dp{p.dp} "
            f"mbs{p.micro_batch_size} {p.recompute} {p.dp_sharding}")


GIB = 2**30


def candidate_axis(results: Mapping[int, SearchResult],
                   price_per_gpu_hour: float | None = None) -> tuple[str, Callable[[int, StepEstimate], float]]:
    """(title, value) of the scatter's x axis, what a plan pays for its throughput: its cost per
    million tokens when a price is given; its GPUs when several cluster sizes were searched;
    else (one size, every plan on the same GPUs) its peak memory per GPU, which is what
    recompute, micro-batch and sharding trade against speed."""
    if price_per_gpu_hour is not None:
        def usd_per_mtok(n: int, est: StepEstimate) -> float:
            money = economics(est.tokens_per_s_per_gpu, est.step_time_s, n, price_per_gpu_hour, None)
            return money["usd_per_million_tokens"]
        return "USD per million tokens", usd_per_mtok
    if len(results) > 1:
        return "GPUs", lambda n, est: n
    return "peak memory per GPU (GiB)", lambda n, est: est.memory.peak_stage.allocator_bytes / GIB


def candidates_figure(results: Mapping[int, SearchResult], title: str = "Ranked plans",
                      price_per_gpu_hour: float | None = None):
    """Total throughput (tokens/s over all GPUs) of every ranked plan against what it costs
    (`candidate_axis`), the Pareto frontier joined by a line, the winner and the runner-up marked."""
    go = graph_objects()
    plans = ranked_overall(results)
    x_title, x_of = candidate_axis(results, price_per_gpu_hour)
    xs = [x_of(n, est) for n, est in plans]
    ys = [est.tokens_per_s_per_gpu * n for n, est in plans]
    labels = [_label(n, est) for n, est in plans]
    fig = go.Figure(go.Scatter(name="plans", x=xs, y=ys, mode="markers", hovertext=labels,
                               marker={"color": "lightgray", "size": 9}))
    front = pareto_front(list(zip(xs, ys)))
    fig.add_trace(go.Scatter(name="Pareto frontier", x=[xs[i] for i in front],
                             y=[ys[i] for i in front], mode="lines+markers",
                             hovertext=[labels[i] for i in front]))
    for rank, name, symbol in ((0, "winner", "star"), (1, "runner-up", "diamond")):
        if len(plans) > rank:
            fig.add_trace(go.Scatter(name=name, x=[xs[rank]], y=[ys[rank]], mode="markers",
                                     hovertext=[labels[rank]], marker={"symbol": symbol, "size": 16}))
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title="tokens/s (all GPUs)")
    return fig


def comparison_figure(winner: StepEstimate, runner_up: StepEstimate,
                      title: str = "Winner and runner-up: where the step time goes"):
    """The two plans' step-time breakdowns side by side (seconds, grouped bars per part)."""
    go = graph_objects()
    parts = [k for k in winner.breakdown if winner.breakdown[k] > 0 or runner_up.breakdown.get(k, 0) > 0]
    fig = go.Figure()
    for name, est in (("winner", winner), ("runner-up", runner_up)):
        fig.add_trace(go.Bar(name=f"{name} ({est.step_time_s:.3f} s)", x=[k.replace("_", " ") for k in parts],
                             y=[float(est.breakdown.get(k, 0.0)) for k in parts]))
    fig.update_layout(title=title, barmode="group", yaxis_title="seconds per step")
    return fig


LAYOUT_FIELDS = ("tp", "pp", "vpp", "dp", "cp", "ep", "micro_batch_size", "recompute",
                 "dp_sharding", "schedule", "offload_optimizer")
"""Plan fields compared when saying how the winner differs from the runner-up."""


def why_text(results: Mapping[int, SearchResult], parts: int = 3) -> str:
    """Why the best plan wins, from the numbers: how its layout differs from the runner-up's,
    its margin per GPU, and the breakdown parts whose seconds differ most between the two."""
    plans = ranked_overall(results)
    if not plans:
        return "no plan fits"
    if len(plans) == 1:
        return f"only one plan ranks: {_label(*plans[0])}"
    (na, a), (nb, b) = plans[0], plans[1]
    changed = [f"{k.replace('_', ' ')} {getattr(a.plan, k)} vs {getattr(b.plan, k)}"
               for k in LAYOUT_FIELDS if getattr(a.plan, k) != getattr(b.plan, k)]
    if na != nb:
        changed.insert(0, f"{na} vs {nb} GPUs")
    keys = set(a.breakdown) | set(b.breakdown)
    diffs = sorted(((k, a.breakdown.get(k, 0.0) - b.breakdown.get(k, 0.0)) for k in keys),
                   key=lambda kv: -abs(kv[1]))[:parts]
    detail = "; ".join(f"{k.replace('_', ' ')} {a.breakdown.get(k, 0):.3f} s vs "
                       f"{b.breakdown.get(k, 0):.3f} s ({d:+.3f} s)" for k, d in diffs if d)
    return (f"Winner {_label(na, a)}; runner-up {_label(nb, b)}. They differ in "
            f"{', '.join(changed) or 'nothing the layout shows'}. {why_better(a, b).capitalize()}."
            + (f" Largest differences in the step (winner vs runner-up): {detail}." if detail else ""))


def sweep_figure(rows: Sequence[dict], title: str = "Best plan per cluster size"):
    """One line per (model, GPU, sequence length) of the best plan's tokens/s per GPU over the
    cluster size; cells without a fitting plan are left out."""
    go = graph_objects()
    lines: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("status") == "ok":
            lines.setdefault((row["model"], row["gpu"], row["seq_len"]), []).append(row)
    fig = go.Figure()
    for (model, gpu, seq), cells in lines.items():
        cells.sort(key=lambda r: r["num_gpus"])
        fig.add_trace(go.Scatter(name=f"{model} on {gpu}, seq {seq}", mode="lines+markers",
                                 x=[int(r["num_gpus"]) for r in cells],
                                 y=[float(r["tokens_per_s_per_gpu"]) for r in cells],
                                 hovertext=[f"MFU {float(r['mfu']):.1%}" for r in cells]))
    fig.update_layout(title=title, xaxis={"title": "GPUs", "type": "log"},
                      yaxis_title="tokens/s per GPU")
    return fig
