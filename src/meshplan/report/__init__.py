"""Rendering: tables, traces and text timelines of results."""

from meshplan.report.timeline import text_timeline
from meshplan.report.trace import chrome_trace, write_trace

__all__ = ["chrome_trace", "text_timeline", "write_trace"]
