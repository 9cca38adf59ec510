"""Figures of one simulated serving run (`serve simulate`): latency CDFs, activity over time
from the iteration log, and SLO attainment.

Pure functions of a `SimulationResult` (and the SLO, when given) to plotly figures; plotly is
imported when a builder runs. Latencies in ms, times in s from the start of the run.
"""

from __future__ import annotations

import numpy as np

from meshplan.report.viz import graph_objects, subplots
from meshplan.serving.metrics.summary import SLO, kv_utilization_over_time, summed_over_time
from meshplan.serving.engine.iterations import time_bins
from meshplan.serving.simulate import SimulationResult

LATENCIES = (("TTFT", "ttft_ms", "ttft_s"), ("TPOT", "tpot_ms", "tpot_s"), ("E2E", "e2e_ms", "e2e_s"))
"""(label, SLO field, RequestRecord property) of the per-request latencies shown."""


def request_latencies_ms(result: SimulationResult) -> dict[str, np.ndarray]:
    """Per completed request: TTFT, TPOT (nan for one-token answers) and E2E in ms."""
    done = [r for r in result.records if np.isfinite(r.finish_s)]
    return {label: np.array([getattr(r, prop) * 1e3 for r in done], dtype=float)
            for label, _, prop in LATENCIES}


MAX_CDF_POINTS = 2000
"""Most points drawn per CDF (assumption: enough for a smooth curve; a million-request run
would otherwise embed megabytes per curve). Larger samples keep evenly spaced ranks."""


def cdf_points(values: np.ndarray, max_points: int = MAX_CDF_POINTS) -> tuple[list[float], list[float]]:
    """(sorted values, share of values <= each), nan left out; at most `max_points` points,
    always including the smallest and the largest value."""
    v = np.sort(values[~np.isnan(values)])
    share = np.arange(1, v.size + 1) / max(v.size, 1)
    if v.size > max_points:
        keep = np.unique(np.linspace(0, v.size - 1, max_points).round().astype(int))
        v, share = v[keep], share[keep]
    return v.tolist(), share.tolist()


def latency_cdf_figure(result: SimulationResult, slo: SLO | None = None,
                       title: str = "Latency distributions"):
    """TTFT, TPOT and E2E CDFs side by side, with each SLO given as a vertical line."""
    go = graph_objects()
    lat = request_latencies_ms(result)
    fig = subplots(rows=1, cols=3, subplot_titles=[label for label, _, _ in LATENCIES])
    for col, (label, field, _) in enumerate(LATENCIES, 1):
        x, y = cdf_points(lat[label])
        fig.add_trace(go.Scatter(name=label, x=x, y=y, mode="lines", line_shape="hv"), row=1, col=col)
        objective = getattr(slo, field) if slo else None
        if objective is not None:
            fig.add_vline(x=objective, line_dash="dash", line_color="red", row=1, col=col,
                          annotation_text=f"SLO {objective:g} ms")
        fig.update_xaxes(title_text=f"{label} ms", row=1, col=col)
    fig.update_yaxes(title_text="share of requests", row=1, col=1)
    fig.update_layout(title=title, showlegend=False)
    return fig


def output_tokens_per_s(result: SimulationResult, edges: np.ndarray) -> np.ndarray:
    """Output tokens emitted per second in each time bin between `edges`."""
    times = [r.token_times_s for r in result.records if r.token_times_s.size]
    counts, _ = np.histogram(np.concatenate(times) if times else np.empty(0), bins=edges)
    return counts / np.diff(edges)


def activity_figure(result: SimulationResult, bins: int = 100, title: str = "Over time"):
    """From the iteration log, in `bins` equal time bins: output tokens/s; running and waiting
    requests (summed over replicas); KV-cache utilization (mean over busy replicas)."""
    go = graph_objects()
    fig = subplots(rows=3, cols=1, shared_xaxes=True,
                   subplot_titles=["output tokens/s", "requests running and waiting", "KV-cache used"])
    if len(result.log) == 0:
        return fig.update_layout(title=title)
    edges = time_bins(result.log, bins)
    t = ((edges[:-1] + edges[1:]) / 2).tolist()
    fig.add_trace(go.Scatter(name="output tokens/s", x=t, y=output_tokens_per_s(result, edges).tolist()),
                  row=1, col=1)
    for name, column in (("running", "num_seqs"), ("waiting", "waiting")):
        fig.add_trace(go.Scatter(name=name, x=t, y=summed_over_time(result.log, column, edges)[1].tolist()),
                      row=2, col=1)
    kv = kv_utilization_over_time(result.log, edges)[1]
    fig.add_trace(go.Scatter(name="KV used", x=t, y=[None if v != v else float(v) for v in kv]),
                  row=3, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=3, col=1)
    fig.update_xaxes(title_text="seconds", row=3, col=1)
    fig.update_layout(title=title, height=750)
    return fig


def slo_attainment(result: SimulationResult, slo: SLO) -> dict[str, float]:
    """Share of completed requests meeting each objective alone, and all of them ("all")."""
    lat = request_latencies_ms(result)
    args = (lat["TTFT"], lat["TPOT"], lat["E2E"])
    n = max(len(args[0]), 1)
    out = {}
    for label, field, _ in LATENCIES:
        objective = getattr(slo, field)
        if objective is not None:
            out[f"{label} <= {objective:g} ms"] = float(SLO(**{field: objective}).met(*args).sum() / n)
    out["all"] = float(slo.met(*args).sum() / n)
    return out


def slo_figure(result: SimulationResult, slo: SLO, percentile: float | None = None,
               title: str = "SLO attainment"):
    """Bars of the share of requests meeting each objective and all of them; the share needed
    (`percentile`, %) as a line."""
    go = graph_objects()
    shares = slo_attainment(result, slo)
    fig = go.Figure(go.Bar(x=list(shares), y=list(shares.values()), name="attained",
                           text=[f"{v:.1%}" for v in shares.values()], textposition="auto"))
    if percentile is not None:
        fig.add_hline(y=percentile / 100, line_dash="dash", line_color="red",
                      annotation_text=f"needed {percentile:g}%")
    fig.update_layout(title=title, yaxis={"tickformat": ".0%", "range": [0, 1.05],
                                          "title": "share of requests"})
    return fig
