"""Figures of one training plan: memory per pipeline stage, where the step time goes, and the
pipeline schedule as a Gantt chart (the same events as the Chrome trace of `trace.py`).

Each builder is a pure function from a library result to a `plotly.graph_objects.Figure`;
plotly is imported when a builder runs (the `viz` extra). Values are plain lists in SI-derived
display units (GiB, s, ms) so the figure's JSON reads as numbers.
"""

from __future__ import annotations

from meshplan.report.trace import chrome_trace
from meshplan.report.viz import graph_objects
from meshplan.training.estimate import StepEstimate
from meshplan.training.memory.total import MemoryEstimate

GIB = 2**30
MEMORY_PARTS = (("weights", "weights_bytes"), ("gradients", "gradients_bytes"),
                ("master weights", "master_weights_bytes"), ("optimizer states", "optimizer_bytes"),
                ("activations", "activations_bytes"), ("logits and loss", "logits_bytes"),
                ("comm buffers", "buffers_bytes"), ("workspaces", "workspace_bytes"),
                ("fragmentation", "fragmentation_bytes"), ("CUDA context", "cuda_context_bytes"))
"""Every component a StageMemory carries, bottom to top of each stacked bar."""


def memory_figure(estimate: MemoryEstimate, title: str = "Memory per GPU by pipeline stage",
                  peak_band=None):
    """Stacked bars (GiB) of each stage's peak memory by component; the GPU's memory as a
    horizontal line (the figure's first layout shape); given the peak's p10-p90 band
    (meshplan.bands), a marker on the peak stage's total with that range as its error bar."""
    go = graph_objects()
    stages = [f"stage {s.stage}" for s in estimate.stages]
    fig = go.Figure()
    for label, field in MEMORY_PARTS:
        values = [getattr(s, field) / GIB for s in estimate.stages]
        if any(values):
            fig.add_trace(go.Bar(name=label, x=stages, y=values))
    if peak_band is not None:
        peak = estimate.peak_bytes / GIB
        fig.add_trace(go.Scatter(
            name="peak, p10-p90", x=[f"stage {estimate.peak_stage.stage}"], y=[peak], mode="markers",
            marker={"color": "black", "symbol": "line-ew-open", "size": 18},
            error_y={"type": "data", "symmetric": False, "array": [peak_band.high / GIB - peak],
                     "arrayminus": [peak - peak_band.low / GIB], "color": "black", "thickness": 1.5},
            hovertext=[f"p10-p90 {peak_band.low / GIB:.1f} - {peak_band.high / GIB:.1f} GiB"]))
    capacity = estimate.gpu_memory_bytes / GIB
    fig.add_hline(y=capacity, line_dash="dash", line_color="black",
                  annotation_text=f"GPU memory {capacity:.1f} GiB")
    fig.update_layout(barmode="stack", title=title, yaxis_title="GiB per GPU",
                      legend_traceorder="reversed")
    return fig


def breakdown_figure(est: StepEstimate, title: str = "Where the step time goes", step_band=None):
    """One horizontal bar per nonzero part of the step (seconds on the critical stage), with its
    share of the step time; given the step time's p10-p90 band, the title quotes it and a last
    bar, the whole step, carries it as an error bar."""
    go = graph_objects()
    parts = [(name, seconds) for name, seconds in est.breakdown.items() if seconds > 0]
    labels = [name.replace("_", " ") for name, _ in parts]
    seconds = [float(s) for _, s in parts]
    shares = [f"{s / est.step_time_s:.1%}" for s in seconds]
    fig = go.Figure(go.Bar(x=seconds, y=labels, orientation="h", text=shares,
                           textposition="auto", name="seconds"))
    heading = f"{title}: {est.step_time_s:.3f} s per step"
    if step_band is not None:
        heading += f" (p10-p90 {step_band.low:.3f} - {step_band.high:.3f} s)"
        fig.add_trace(go.Bar(
            x=[est.step_time_s], y=["whole step"], orientation="h", name="whole step, p10-p90",
            error_x={"type": "data", "symmetric": False, "array": [step_band.high - est.step_time_s],
                     "arrayminus": [est.step_time_s - step_band.low], "color": "black"}))
    fig.update_layout(title=heading, xaxis_title="seconds", yaxis={"autorange": "reversed"},
                      barmode="overlay")
    return fig


MAX_BARS = 20_000
"""Most bars a Gantt chart draws: beyond this a self-contained page grows past ~5 MB and the
browser stalls. A longer schedule shows its first and last MAX_BARS / 2 events (warm-up and
cool-down, where the bubble is) with the middle marked; the Chrome trace (--trace) keeps all."""


def thinned(events: list[dict], max_bars: int = MAX_BARS) -> tuple[list[dict], tuple[float, float] | None]:
    """(events to draw, the (start, end) in ms of the span left out, or None): all events when
    they are at most `max_bars`, else the first and the last max_bars // 2 by start time."""
    if len(events) <= max_bars:
        return events, None
    ordered = sorted(events, key=lambda e: e["ts"])
    half = max_bars // 2
    head, tail = ordered[:half], ordered[-half:]
    return head + tail, (ordered[half]["ts"] / 1e3, tail[0]["ts"] / 1e3)


def gantt_figure(trace: dict, title: str = "Pipeline schedule", max_bars: int = MAX_BARS):
    """A Gantt chart of a Chrome trace (`chrome_trace`): one row per (stage, stream), one bar per
    complete event, one legend entry per event category (F, B, W, send, tp comm, ...); at most
    `max_bars` bars (see `thinned`)."""
    go = graph_objects()
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes = {key: f"stage {key[0]} {name}" for key, name in sorted(threads.items())}
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    drawn, gap = thinned(complete, max_bars)
    by_cat: dict[str, list[dict]] = {}
    for e in drawn:
        by_cat.setdefault(e["cat"], []).append(e)
    fig = go.Figure()
    for cat, events in by_cat.items():
        fig.add_trace(go.Bar(
            name=cat, orientation="h", y=[lanes[(e["pid"], e["tid"])] for e in events],
            base=[e["ts"] / 1e3 for e in events], x=[e["dur"] / 1e3 for e in events],
            hovertext=[e["name"] for e in events], hoverinfo="text+x"))
    if gap is not None:
        fig.add_vrect(x0=gap[0], x1=gap[1], fillcolor="lightgray", opacity=0.4, line_width=0,
                      annotation_text=f"{len(complete) - len(drawn):,} of {len(complete):,} events not "
                                      "drawn (all are in --trace)", annotation_position="top left")
    fig.update_layout(title=title, barmode="overlay", xaxis_title="ms from step start",
                      height=max(450, 24 * len(lanes) + 160),  # a readable label per lane
                      yaxis={"autorange": "reversed", "categoryorder": "array",
                             "categoryarray": list(lanes.values())})
    return fig


def timeline_figure(est: StepEstimate, title: str = "Pipeline schedule"):
    """The step's pipeline as a Gantt chart: compute (F/B/W), p2p sends, exposed TP and DP
    communication per stage. Needs an estimate made with `with_events=True`."""
    from meshplan.training.estimate_report import trace_extras

    return gantt_figure(chrome_trace(est.pipeline.events, extra=trace_extras(est)), title)
