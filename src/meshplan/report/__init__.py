"""Rendering: tables, traces."""

from meshplan.report.trace import chrome_trace, write_trace

__all__ = ["chrome_trace", "write_trace"]
