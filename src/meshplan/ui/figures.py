"""Thin adapter from a job's result to the report package's page (meshplan.report.pages_*: the
same headline, figures and texts as `--html`), as JSON for the browser: figures serialised with
`fig.to_json()` for plotly.js. No figure is drawn here."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def report_json(build: Callable[[], object], notes: Sequence[str | None] = ()) -> dict | None:
    """`build()` (a meshplan.report.html.Report) as {headline, notes, sections: [{title, text,
    figure}]}, `notes` (what the CLI says on stderr, e.g. the framework it chose) leading the
    report's own; None when the viz extra (plotly) is not installed, so results still show."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return None
    page = build()
    return {"title": page.title, "headline": [list(row) for row in page.headline],
            "notes": [n for n in notes if n] + list(page.notes),
            "sections": [{"title": s.title, "text": s.text,
                          "figure": s.figure.to_json() if s.figure is not None else None}
                         for s in page.sections]}


def inputs(body: dict) -> dict[str, str]:
    """A request's inputs as the report's inputs table lists the flags."""
    from meshplan.cli.html_option import inputs as flag_inputs

    flat: dict[str, object] = {}
    for key, value in body.items():
        if isinstance(value, dict) and key != "prices":
            flat.update(value)
        else:
            flat[key] = value
    return flag_inputs(flat)
