"""Latency-throughput figures of serving deployments: `serve sweep`'s curve of one deployment
over request rates, and `serve plan`'s ranked plans with their SLOs and capacities."""

from __future__ import annotations

from collections.abc import Sequence

from meshplan.report.viz import graph_objects, require, subplots
from meshplan.serving.search.capacity import Targets
from meshplan.serving.search.report import layout
from meshplan.serving.search.run import SearchResult

METRICS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E", "e2e"))
"""(label, key) of the latencies: key_ms_pXX in sweep rows, key in SLO margins, key_ms in Targets."""
PERCENTILES = ("p50", "p90", "p99")
BAR_HEIGHT_PX = 40
"""Height of one plan's bar in the capacity chart (the chart grows with the plans)."""


def _slo_line(fig, targets: Targets | None, key: str, col: int) -> None:
    objective = getattr(targets, f"{key}_ms") if targets else None
    if objective is not None:
        fig.add_hline(y=objective, line_dash="dash", line_color="red", row=1, col=col,
                      annotation_text=f"SLO P{targets.percentile:g} {objective:g} ms")


def sweep_curve_figure(rows: Sequence[dict], targets: Targets | None = None,
                       title: str = "Latency vs throughput"):
    """TTFT, TPOT and E2E percentiles (ms) against completed requests/s, one point per swept
    rate, with the SLOs of `targets` (if any) as horizontal lines."""
    go = graph_objects()
    fig = subplots(rows=1, cols=3, subplot_titles=[label for label, _ in METRICS])
    x = [float(r["requests_per_s"]) for r in rows]
    offered = [f"offered {float(r['request_rate']):g} req/s" for r in rows]
    palette = require("plotly.colors").qualitative.Plotly
    for col, (label, key) in enumerate(METRICS, 1):
        for p, color in zip(PERCENTILES, palette):
            fig.add_trace(go.Scatter(name=f"{label} {p}", x=x, y=[float(r[f"{key}_ms_{p}"]) for r in rows],
                                     mode="lines+markers", hovertext=offered, legendgroup=p,
                                     legendgrouptitle_text=p if col == 1 else None,
                                     line={"color": color}), row=1, col=col)
        _slo_line(fig, targets, key, col)
        fig.update_xaxes(title_text="requests/s completed", row=1, col=col)
        fig.update_yaxes(title_text=f"{label} ms", row=1, col=col)
    fig.update_layout(title=title)
    return fig


def _shown(targets: Targets) -> list[tuple[str, str]]:
    return [(label, key) for label, key in METRICS if getattr(targets, f"{key}_ms") is not None]


def _plan_points(c, rate: float, key: str, objective: float) -> tuple[list, list, list, list]:
    """(x, y, marker symbols, hover texts) of one plan's curve for one objective: every rate its
    capacity search simulated (small dots), its capacity (x) and the verifying simulation at the
    target rate (circle), by total rate over its replicas."""
    points = [(r * c.replicas, m.get(key, float("nan")) * objective, "circle-open", "probed")
              for r, m in c.capacity.probes]
    if c.capacity.rate > 0:
        points.append((c.capacity.rate * c.replicas, c.capacity.margins[key] * objective, "x",
                       "at capacity"))
    points.append((rate, c.verified_margins.get(key, float("nan")) * objective, "circle",
                   "at the target rate"))
    points.sort(key=lambda p: p[0])
    return tuple(list(v) for v in zip(*points))


def plan_curves_figure(result: SearchResult,
                       title: str = "Plans: latency against request rate, with capacity"):
    """Per ranked plan, its latency-throughput curve: the SLO percentile of each objective at
    every rate its capacity search simulated, at its capacity and at the target rate (from the
    verifying simulation); the SLOs as horizontal lines and the target rate as a vertical one."""
    go = graph_objects()
    t = result.targets
    shown = _shown(t)
    fig = subplots(rows=1, cols=len(shown), subplot_titles=[f"P{t.percentile:g} {label}" for label, _ in shown])
    palette = require("plotly.colors").qualitative.Plotly
    for i, c in enumerate(result.ranked, 1):
        name, color = f"#{i} {layout(c)} on {c.gpu} x{c.replicas}", palette[(i - 1) % len(palette)]
        for col, (label, key) in enumerate(shown, 1):
            x, y, symbols, hover = _plan_points(c, result.rate, key, getattr(t, f"{key}_ms"))
            fig.add_trace(go.Scatter(name=name, x=x, y=y, mode="lines+markers", legendgroup=name,
                                     showlegend=col == 1, marker={"symbol": symbols, "size": 9, "color": color},
                                     line={"color": color}, hovertext=hover), row=1, col=col)
            _slo_line(fig, t, key, col)
            fig.add_vline(x=result.rate, line_dash="dot", line_color="gray", row=1, col=col)
            fig.update_xaxes(title_text="requests/s (all replicas)", row=1, col=col)
            fig.update_yaxes(title_text=f"{label} ms", row=1, col=col)
    fig.update_layout(title=title)
    return fig


def plan_capacity_figure(result: SearchResult, title: str = "Capacity of each plan"):
    """Horizontal bars of each ranked plan's capacity (requests/s within the SLOs, all its
    replicas), the best plan on top, and the target rate as a line. The plan names run along
    the y axis, level and whole, so no label is rotated or cut however long it is."""
    go = graph_objects()
    names = [f"#{i} {layout(c)} on {c.gpu} x{c.replicas} ({c.gpus} GPUs)" for i, c in enumerate(result.ranked, 1)]
    values = [c.capacity.rate * c.replicas for c in result.ranked]
    fig = go.Figure(go.Bar(x=values, y=names, orientation="h", name="capacity",
                           text=[f"{v:.2f} req/s" for v in values], textposition="auto"))
    fig.add_vline(x=result.rate, line_dash="dash", line_color="red",
                  annotation_text=f"target {result.rate:g} req/s", annotation_position="top")
    fig.update_yaxes(autorange="reversed", automargin=True, tickangle=0)
    fig.update_layout(title=title, xaxis_title="requests/s within the SLOs",
                      height=BAR_HEIGHT_PX * len(names) + 160, margin={"l": 20})
    return fig
