"""`meshplan validate [FILE...]`: measured vs predicted for every run record, and the summary.
With no file it checks the calibration records the package ships (`--records builtin`)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich import box
from rich.table import Table

from meshplan.cli import html_option
from meshplan.cli.render import si
from meshplan.cli.common import QUIET, console, err_console, print_json, progress, show_progress, user_errors, with_site
from meshplan.records import with_set
from meshplan.validate.records import read_records
from meshplan.validate.run import Skip, predict, report, stats_line

UNITS = {"tokens_per_s_per_gpu": ("tok/s/GPU", 1.0), "step_time_s": ("s", 1.0),
         "peak_memory_gib": ("GiB", 1.0)}


def validate(
    files: list[Path] = typer.Argument(None, help="Run-record YAML files (SCHEMA.md format); "
                                       "none: the built-in calibration records."),
    records_set: str = typer.Option(None, "--records", help="A record set the package ships: "
                                    "builtin (the training and serving calibration records), "
                                    "training, serving, held-out (never fitted on), all; or one "
                                    "held-out file, e.g. held-out/serving-engines-2025."),
    json_out: bool = typer.Option(False, "--json", help="Print the SCHEMA.md JSON report."),
    quiet: bool = QUIET,
    strict: bool = typer.Option(False, "--strict", help="Stop at the first record that breaks the "
                                "schema (exit 2) instead of skipping it with the reason."),
    workers: int = typer.Option(None, "--workers", help="Processes predicting records in parallel "
                                "(default: the CPU count; 1 = in this process)."),
    html: Path = html_option.HTML,
) -> None:
    """Predict every record's measured quantities and print the errors and a summary. A record
    that cannot be parsed is skipped with its reason (unless --strict)."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    records, bad = [], []
    for path in with_set(files, records_set, default="builtin"):
        good, skipped = read_records(path, strict=strict)
        records += good
        bad += [Skip(rid, reason) for rid, reason in skipped]
    with progress("predicting records", show_progress(quiet, json_out)) as update:
        rows, skips = predict(records, update, workers or os.cpu_count() or 1)
    skips = bad + skips
    for skip in skips:  # unreadable and unrepresentable records alike, with the reason
        err_console.print(f"[yellow]skipped[/] {skip.id}: {skip.reason}", highlight=False, soft_wrap=True)
    for rid, notes in dict((r.id, r.notes) for r in rows if r.notes).items():  # once per record
        for note in notes:
            err_console.print(f"note: {rid}: {note}", highlight=False, markup=False, soft_wrap=True)
    data = report(rows, skips)

    def page():
        from meshplan.report.pages_validate import record_groups, validate_page

        return validate_page(rows, data["summary"], len(skips), record_groups(records),
                             "meshplan validate: measured vs predicted", "meshplan validate", given)

    if json_out:
        print_json(data)
        html_option.write(html, page)
        return
    table = Table(title="measured vs predicted", box=box.SIMPLE_HEAD)
    for col in ("record", "metric", "measured", "predicted", "p10-p90", "error"):
        table.add_column(col, justify="left" if col in ("record", "metric") else "right")
    for r in rows:
        unit = UNITS.get(r.metric, (r.metric, 1.0))[0]
        band = f"{si(r.low)}-{si(r.high)}".replace(" ", "") if r.low is not None else "-"
        table.add_row(r.id, unit, f"{r.measured:,.4g}", f"{r.predicted:,.4g}",
                      band + ("*" if r.extrapolating else ""), f"{r.rel_error:+.1%}",
                      style="red" if abs(r.rel_error) > 0.2 else None)
    console.print(table)
    render_summary(data["summary"], len(skips), len(records) + len(bad))
    render_bands(rows)
    html_option.write(html, page)


def render_bands(rows) -> None:
    """How many measured values fall inside their band, and how many rows extrapolate."""
    banded = [r for r in rows if r.low is not None]
    if not banded:
        return
    inside = sum(r.low <= r.measured <= r.high for r in banded)
    console.print(f"inside the p10-p90 band: {inside} of {len(banded)} ({inside / len(banded):.0%}; "
                  "80% is the promise for records the fit never saw)", highlight=False)
    outside = len({r.id for r in banded if r.extrapolating})
    if outside:
        console.print(f"[yellow]* {outside} records extrapolate[/] beyond the calibrated regimes "
                      "(--json lists why)", highlight=False)


def render_summary(summary: dict, skipped: int, total: int) -> None:
    """Median and p90 absolute error, overall and per metric, and the coverage."""
    console.print(f"[bold]all[/]: {stats_line(summary)}", highlight=False)
    for metric, s in summary["by_metric"].items():
        console.print(f"  {metric}: {stats_line(s)}", highlight=False)
    console.print(f"skipped {skipped} of {total} records", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the `validate` command."""
    app.command("validate")(user_errors(with_site(validate)))
