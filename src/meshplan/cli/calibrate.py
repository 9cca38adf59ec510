"""`meshplan calibrate FILE...`: fit the step-time model's engine constants on measured runs."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from meshplan import calibrate as cal
from meshplan.cli.common import console, user_errors
from meshplan.validate.records import load_records

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "training" / "data" / "fitted_constants.yaml"


def calibrate(
    files: list[Path] = typer.Argument(..., help="Training run-record YAML files to fit on."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Where to write the fitted constants."),
    loso: bool = typer.Option(False, "--loso", help="Also report leave-one-source-out error (slow)."),
    max_nfev: int = typer.Option(100, help="Model evaluations the least-squares fit may use."),
) -> None:
    """Least squares on log error of tokens/s per GPU; writes the constants with their fit record."""
    records = [r for path in files for r in load_records(path)]
    cases = cal.prepare(records)
    table = cal.fit(cases, max_nfev=max_nfev)
    folds = cal.leave_one_source_out(cases, table) if loso else None
    doc = cal.fit_document(table, cases, [p.name for p in files], folds)
    out.write_text("# Fitted by `meshplan calibrate`; read by meshplan.training.constants.\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    fit = doc["fit"]
    console.print(f"fitted on {fit['records']} records -> {out}", highlight=False)
    console.print(f"in-sample: {_fmt(fit['in_sample'])}", highlight=False)
    if folds is not None:
        console.print(f"leave-one-source-out: {_fmt(fit['leave_one_source_out'])}", highlight=False)


def _fmt(s: dict) -> str:
    return f"median |err| {s['median_abs_rel_error']:.1%}, p90 |err| {s['p90_abs_rel_error']:.1%}"


def register(app: typer.Typer) -> None:
    """Add the `calibrate` command."""
    app.command("calibrate")(user_errors(calibrate))
