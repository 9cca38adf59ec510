"""Goodput figure: a waterfall of where a long run's wall clock goes (training at the predicted
step, stragglers, checkpoint stalls, work lost to interruptions, restarts), in days, or hours per
day of training when no token budget is given. plotly is imported when the builder runs."""

from __future__ import annotations

from meshplan.goodput import Goodput
from meshplan.goodput.render import WATERFALL_LABELS
from meshplan.report.viz import graph_objects


def waterfall_figure(g: Goodput, title: str = "Where the wall clock goes"):
    """A plotly Waterfall: training first, then each loss stacked on it, then the total."""
    go = graph_objects()
    scale, unit = (86_400.0, "days") if g.has_budget else (3_600.0, "hours per day of training")
    parts = g.waterfall()
    labels = [WATERFALL_LABELS[k] for k in parts] + ["wall clock"]
    values = [v / scale for v in parts.values()] + [0.0]
    measure = ["absolute"] + ["relative"] * (len(parts) - 1) + ["total"]
    text = [f"{v:,.1f}" for v in values[:-1]] + [f"{g.wall_s / scale:,.1f}"]
    fig = go.Figure(go.Waterfall(x=labels, y=values, measure=measure, text=text,
                                 textposition="outside", name=unit))
    fig.update_layout(title=f"{title}: effective training time "
                            f"{g.effective_training_time_ratio:.1%}", yaxis_title=unit)
    return fig
