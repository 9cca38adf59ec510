"""One self-contained HTML report: the inputs, the headline numbers, text and plotly figures.

Rendered from the Jinja2 template `templates/report.html` (package data) with plotly.js inlined
once, so the file opens offline; each figure travels as its JSON and is drawn by
`Plotly.newPlot`. Needs the `viz` extra (plotly, jinja2), imported when a report is rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from os import PathLike
from pathlib import Path

from meshplan.report.viz import require


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A heading with a paragraph, a figure, or both."""

    title: str
    figure: object | None = None
    """A plotly.graph_objects.Figure (None: text only)."""
    text: str = ""
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None
    """(column headers, rows of formatted cells) shown under the text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """Everything one HTML report shows, top to bottom."""

    title: str
    command: str
    """The command that made it, e.g. `meshplan train memory`."""
    inputs: Mapping[str, object] = field(default_factory=dict)
    """The flags and their values (shown as a table)."""
    headline: Sequence[tuple[str, str]] = ()
    """(label, formatted value) rows of the headline table."""
    sections: Sequence[Section] = ()
    notes: Sequence[str] = ()
    """Lines shown under the headline (warnings, what was chosen)."""


def _script_json(figure) -> str:
    """A figure's JSON, safe inside a <script> element (no `</` to close it early)."""
    return figure.to_json().replace("</", "<\\/")


def render_html(report: Report) -> str:
    """The report as one HTML document with plotly.js embedded."""
    jinja2 = require("jinja2")
    plotly_js = require("plotly.offline").get_plotlyjs()
    env = jinja2.Environment(loader=jinja2.PackageLoader("meshplan.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    sections = [{"title": s.title, "text": s.text, "table": s.table,
                 "figure": None if s.figure is None else _script_json(s.figure)}
                for s in report.sections]
    inputs = [(name, value) for name, value in report.inputs.items() if value not in (None, False)]
    return env.get_template("report.html").render(
        report=report, inputs=inputs, sections=sections, plotly_js=plotly_js,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def write_html(path: str | PathLike[str], report: Report) -> None:
    """Render `report` and write it to `path` (UTF-8)."""
    from meshplan.outfiles import write_atomic

    write_atomic(path, render_html(report), "--html")
