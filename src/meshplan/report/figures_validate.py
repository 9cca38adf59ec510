"""Figures of `meshplan validate`: predicted against measured, and the error by group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshplan.report.viz import graph_objects
from meshplan.validate.run import Row

BAND = 0.10
"""The relative-error band drawn around the diagonal (±10%)."""


def validate_scatter_figure(rows: Sequence[Row], title: str = "Predicted vs measured"):
    """Log-log scatter of predicted against measured, one colour per metric, the diagonal and
    the ±10% band around it."""
    go = graph_objects()
    fig = go.Figure()
    metrics: dict[str, list[Row]] = {}
    for r in rows:
        metrics.setdefault(r.metric, []).append(r)
    values = [v for r in rows for v in (r.measured, r.predicted) if v > 0]
    if values:
        lo, hi = min(values) / 1.5, max(values) * 1.5
        for factor, name in ((1 - BAND, f"-{BAND:.0%}"), (1.0, "exact"), (1 + BAND, f"+{BAND:.0%}")):
            fig.add_trace(go.Scatter(name=name, x=[lo, hi], y=[lo * factor, hi * factor], mode="lines",
                                     line={"color": "gray", "dash": "solid" if factor == 1 else "dot"},
                                     hoverinfo="skip"))
    for metric, group in metrics.items():
        fig.add_trace(go.Scatter(name=metric, mode="markers", x=[r.measured for r in group],
                                 y=[r.predicted for r in group],
                                 hovertext=[f"{r.id}: {r.rel_error:+.1%}" for r in group]))
    fig.update_layout(title=title, xaxis={"type": "log", "title": "measured"},
                      yaxis={"type": "log", "title": "predicted"})
    return fig


def error_by_group_figure(rows: Sequence[Row], groups: Mapping[str, str],
                          title: str = "Relative error by source and GPU"):
    """One box of relative errors (predicted / measured - 1) per group, `groups` mapping a
    record id to its group (e.g. 'megatron-sc21 / a100-sxm-80gb'); ungrouped ids go to 'other'."""
    go = graph_objects()
    by_group: dict[str, list[Row]] = {}
    for r in rows:
        by_group.setdefault(groups.get(r.id, "other"), []).append(r)
    fig = go.Figure()
    for name in sorted(by_group):
        group = by_group[name]
        fig.add_trace(go.Box(name=name, y=[r.rel_error for r in group], boxpoints="all",
                             hovertext=[f"{r.id} {r.metric}" for r in group]))
    fig.add_hrect(y0=-BAND, y1=BAND, fillcolor="green", opacity=0.1, line_width=0)
    fig.update_layout(title=title, showlegend=False, yaxis={"tickformat": "+.0%", "title": "relative error"},
                      height=max(450, 30 * len(by_group)))
    return fig
