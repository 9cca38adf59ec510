"""Rendering: traces and text timelines of results; with the viz extra, plotly figures
(`figures_*`, pure functions of result objects) and self-contained HTML reports (`html`,
assembled per command by `pages_*`). Those modules import plotly and jinja2 only when called."""

from meshplan.report.timeline import text_timeline
from meshplan.report.trace import chrome_trace, write_trace

__all__ = ["chrome_trace", "text_timeline", "write_trace"]
