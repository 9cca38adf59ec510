"""`--html FILE`: the option every predicting command takes, and writing its report.

A command checks the viz extra before it computes (`check`), so a missing plotly or jinja2
stops it at once with one message and exit code 2; after printing its normal output (or
--json) it writes the report (`write`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import typer

from meshplan.cli.common import err_console

HTML = typer.Option(None, "--html", help="Also write a self-contained HTML report with plots to this file "
                    "(needs the viz extra: pip install 'meshplan[viz]').")
NOT_INPUTS = ("html", "json_out", "quiet")
"""Flags left out of a report's inputs table (they shape the output, not the prediction)."""


def check(html: Path | None) -> None:
    """With --html, fail now (ConfigError, exit 2) when the viz extra is missing."""
    if html is not None:
        from meshplan.report.viz import check_viz

        check_viz()


def inputs(flags: Mapping[str, object]) -> dict[str, str]:
    """The flags a report lists: given values, named and spelled as on the command line."""
    def spell(value: object) -> str:
        if isinstance(value, (list, tuple)):
            return ", ".join(spell(v) for v in value)
        return str(value)

    return {"--" + name.replace("_", "-"): spell(value) for name, value in flags.items()
            if name not in NOT_INPUTS and value is not None and value is not False}


def write(html: Path | None, page: Callable[[], object]) -> None:
    """With --html, build the report (`page()`, a meshplan.report.html.Report) and write it;
    say where on stderr (stdout stays the command's output, e.g. its JSON)."""
    if html is None:
        return
    from meshplan.report.html import write_html

    write_html(html, page())
    err_console.print(f"report written to {html}", highlight=False)
