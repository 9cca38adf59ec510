"""Figures of a training plan search (`train plan`) and of a sweep (`train sweep`).

The search results come keyed by GPU count (one `SearchResult` per cluster size searched); plans
of every size are ranked together by their objective score (lower is better, as in the search).
Given their p10-p90 bands (`plan_bands`, meshplan.bands), the figures draw them as error bars and
mark the plans whose question lies outside the calibration records (`extrapolating`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from meshplan.bands.training import EstimateBands, estimate_bands
from meshplan.report.viz import graph_objects
from meshplan.training.search.economics import economics
from meshplan.training.estimate import StepEstimate
from meshplan.training.search.plans import SearchResult, why_better


def ranked_overall(results: Mapping[int, SearchResult]) -> list[tuple[int, StepEstimate]]:
    """(GPU count, plan) of every ranked plan of every size, best score first."""
    return [(n, est) for n, est, _ in ranked_with_bands(results)]


Bands = Mapping[int, Sequence[EstimateBands]]
"""Per GPU count, the bands of that search's ranked plans, in rank order."""


def plan_bands(model, clusters: Mapping[int, object], results: Mapping[int, SearchResult]) -> dict:
    """The p10-p90 bands of every ranked plan of `results` (keyed as they are)."""
    return {n: [estimate_bands(model, clusters[n], est) for est in r.ranked] for n, r in results.items()}


def ranked_with_bands(results: Mapping[int, SearchResult],
                      bands: Bands | None = None) -> list[tuple[int, StepEstimate, EstimateBands | None]]:
    """(GPU count, plan, its bands or None) of every ranked plan of every size, best score first."""
    scored = [(score, n, est, bands[n][i] if bands else None)
              for n, r in results.items() for i, (est, score) in enumerate(zip(r.ranked, r.scores))]
    scored.sort(key=lambda item: item[0])
    return [(n, est, band) for _, n, est, band in scored]


def error_bars(values: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> dict:
    """A plotly `error_y` drawing each value's p10-p90 range (asymmetric, in the value's units)."""
    return {"type": "data", "symmetric": False, "thickness": 1.2, "width": 4, "color": "dimgray",
            "array": [h - v for v, h in zip(values, highs)],
            "arrayminus": [v - lo for v, lo in zip(values, lows)]}


EXTRAPOLATING_MARKER = {"symbol": "x-thin-open", "size": 15, "line": {"width": 2}, "color": "orangered"}
"""How a figure marks a plan outside the calibration records (its band is twice as wide)."""


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
                      price_per_gpu_hour: float | None = None, bands: Bands | None = None):
    """Total throughput (tokens/s over all GPUs) of every ranked plan against what it costs
    (`candidate_axis`), the Pareto frontier joined by a line, the winner and the runner-up marked;
    given `bands`, each point's p10-p90 as an error bar and the extrapolating plans crossed out."""
    go = graph_objects()
    plans = ranked_with_bands(results, bands)
    x_title, x_of = candidate_axis(results, price_per_gpu_hour)
    xs = [x_of(n, est) for n, est, _ in plans]
    ys = [est.tokens_per_s_per_gpu * n for n, est, _ in plans]
    labels = [_label(n, est) for n, est, _ in plans]
    errors = None
    if bands:
        lows = [b.tokens_per_s_per_gpu.low * n for n, _, b in plans]
        highs = [b.tokens_per_s_per_gpu.high * n for n, _, b in plans]
        labels = [f"{t}<br>p10-p90 {lo:,.0f} - {hi:,.0f} tokens/s" for t, lo, hi in zip(labels, lows, highs)]
        errors = error_bars(ys, lows, highs)

    def subset(idx: list[int]) -> dict:
        if errors is None:
            return {}
        return {"error_y": {**errors, "array": [errors["array"][i] for i in idx],
                            "arrayminus": [errors["arrayminus"][i] for i in idx]}}

    everything = list(range(len(plans)))
    fig = go.Figure(go.Scatter(name="plans", x=xs, y=ys, mode="markers", hovertext=labels,
                               marker={"color": "lightgray", "size": 9}, **subset(everything)))
    front = pareto_front(list(zip(xs, ys)))
    fig.add_trace(go.Scatter(name="Pareto frontier", x=[xs[i] for i in front],
                             y=[ys[i] for i in front], mode="lines+markers",
                             hovertext=[labels[i] for i in front], **subset(front)))
    for rank, name, symbol in ((0, "winner", "star"), (1, "runner-up", "diamond")):
        if len(plans) > rank:
            fig.add_trace(go.Scatter(name=name, x=[xs[rank]], y=[ys[rank]], mode="markers",
                                     hovertext=[labels[rank]], marker={"symbol": symbol, "size": 16},
                                     **subset([rank])))
    _mark_extrapolating(fig, [i for i, (_, _, b) in enumerate(plans) if b and b.extrapolating],
                        xs, ys, [b.extrapolating if b else () for _, _, b in plans])
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title="tokens/s (all GPUs)")
    return fig


def _mark_extrapolating(fig, idx: list[int], xs: Sequence, ys: Sequence,
                        reasons: Sequence[Sequence[str]]) -> None:
    """Cross out the points `idx` (plans outside the calibration records), their reasons on hover."""
    if not idx:
        return
    go = graph_objects()
    fig.add_trace(go.Scatter(
        name="extrapolating (band doubled)", x=[xs[i] for i in idx], y=[ys[i] for i in idx],
        mode="markers", marker=EXTRAPOLATING_MARKER,
        hovertext=["extrapolating: " + "; ".join(reasons[i]) for i in idx]))


def comparison_figure(winner: StepEstimate, runner_up: StepEstimate,
                      title: str = "Winner and runner-up: where the step time goes",
                      bands: Sequence[EstimateBands] | None = None):
    """The two plans' step-time breakdowns side by side (seconds, grouped bars per part); given
    the two plans' `bands`, then each whole step with its p10-p90 as an error bar."""
    go = graph_objects()
    parts = [k for k in winner.breakdown if winner.breakdown[k] > 0 or runner_up.breakdown.get(k, 0) > 0]
    names = [k.replace("_", " ") for k in parts] + (["whole step"] if bands else [])
    fig = go.Figure()
    for i, (name, est) in enumerate((("winner", winner), ("runner-up", runner_up))):
        ys = [float(est.breakdown.get(k, 0.0)) for k in parts]
        extra = {}
        if bands:
            band = bands[i].step_time_s
            whole = error_bars([est.step_time_s], [band.low], [band.high])  # the parts carry no bar
            extra["error_y"] = {**whole, "array": [None] * len(parts) + whole["array"],
                                "arrayminus": [None] * len(parts) + whole["arrayminus"]}
            ys.append(est.step_time_s)
        fig.add_trace(go.Bar(name=f"{name} ({est.step_time_s:.3f} s)", x=names, y=ys, **extra))
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
    cluster size, with its p10-p90 (`tokens_per_s_low`/`_high`) as error bars when the rows carry
    it and the extrapolating cells crossed out; cells without a fitting plan are left out."""
    go = graph_objects()
    lines: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("status") == "ok":
            lines.setdefault((row["model"], row["gpu"], row["seq_len"]), []).append(row)
    fig = go.Figure()
    crossed: list[dict] = []
    for (model, gpu, seq), cells in lines.items():
        cells.sort(key=lambda r: r["num_gpus"])
        ys = [float(r["tokens_per_s_per_gpu"]) for r in cells]
        extra = {}
        if all(r.get("tokens_per_s_low") not in (None, "") for r in cells):
            extra["error_y"] = error_bars(ys, [float(r["tokens_per_s_low"]) for r in cells],
                                          [float(r["tokens_per_s_high"]) for r in cells])
        fig.add_trace(go.Scatter(name=f"{model} on {gpu}, seq {seq}", mode="lines+markers",
                                 x=[int(r["num_gpus"]) for r in cells], y=ys,
                                 hovertext=[f"MFU {float(r['mfu']):.1%}" for r in cells], **extra))
        crossed += [r for r in cells if r.get("extrapolating")]
    _mark_extrapolating(fig, list(range(len(crossed))), [int(r["num_gpus"]) for r in crossed],
                        [float(r["tokens_per_s_per_gpu"]) for r in crossed],
                        [str(r["extrapolating"]).split("; ") for r in crossed])
    fig.update_layout(title=title, xaxis={"title": "GPUs", "type": "log"},
                      yaxis_title="tokens/s per GPU")
    return fig
