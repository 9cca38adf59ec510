"""`meshplan calibrate FILE...`: fit the step-time model's engine constants on measured runs."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from meshplan.calibration import training as cal
from meshplan.cli.common import QUIET, console, progress, show_progress, user_errors
from meshplan.errors import ConfigError
from meshplan.outfiles import check_writable, write_atomic
from meshplan.records import with_set
from meshplan.validate.records import load_records


def calibrate(
    files: list[Path] = typer.Argument(None, help="Run-record YAML files to fit on (training or serving)."),
    records_set: str = typer.Option(None, "--records", help="Fit on a record set the package ships: "
                                    "training or serving (the calibration records)."),
    site: str = typer.Option(None, "--site", help="Fit a site profile NAME on your own runs (a few "
                             "multipliers on the packaged model) and save it to the config directory "
                             "(or --out); use it with --site NAME on any predicting command."),
    out: Path = typer.Option(None, "--out", help="File to write to. Without --site: the fitted package "
                             "constants (required; nothing is written into the installed package unless "
                             "this names its data file). With --site: the profile file instead of "
                             "<config dir>/sites/NAME.yaml."),
    loso: bool = typer.Option(False, "--loso", help="Also report leave-one-source-out error (slow)."),
    max_nfev: int = typer.Option(100, help="Model evaluations the least-squares fit may use."),
    quiet: bool = QUIET,
) -> None:
    """Fit the step-time constants on training records or the serving engine constants on serving
    records. Least squares on the log error of tokens/s per GPU (training) or of every measured
    metric (serving); writes them with their fit record (date, inputs, in-sample and LOSO
    errors) to --out."""
    files = with_set(files, records_set)
    if not files:
        raise ConfigError("give run-record files to fit on, or --records training|serving")
    if site is not None:
        return _calibrate_site(files, site, out, quiet)
    if out is not None:
        check_writable(out, "--out")  # before the fit, not after it
    if out is None:
        raise ConfigError("--out: give the file to write the fitted package constants to (or fit a "
                          "site profile with --site NAME)")
    records = [r for path in files for r in load_records(path)]
    if not records:
        raise ConfigError("the files hold no records to fit on")
    kinds = {r.kind for r in records}
    if len(kinds) > 1:
        raise ConfigError("the files hold training and serving records; fit one kind per call, "
                          "each with its own --out")
    names = [p.name for p in files]
    fit = _calibrate_serving if kinds == {"serving"} else _calibrate_training
    with progress(f"fitting {len(records)} {kinds.pop()} records", show_progress(quiet)):
        fit(records, names, out, loso, max_nfev)


def _calibrate_serving(records, names, out: Path, loso: bool, max_nfev: int) -> None:
    from meshplan.calibration import serving as cs

    cases = cs.prepare(records)
    table = cs.fit(cases, max_nfev=min(max_nfev, 40))
    folds = cs.leave_one_source_out(cases, table) if loso else None
    doc = cs.fit_document(table, cases, names, folds)
    write_atomic(out, "# Fitted by `meshplan calibrate`; read by meshplan.serving.cost.constants.\n"
                 + yaml.safe_dump(doc, sort_keys=False), "--out")
    _report(doc["fit"], out)


def _calibrate_training(records, names, out: Path, loso: bool, max_nfev: int) -> None:
    cases = cal.prepare(records)
    table = cal.fit(cases, max_nfev=max_nfev)
    folds = cal.leave_one_source_out(cases, table) if loso else None
    doc = cal.fit_document(table, cases, names, folds)
    write_atomic(out, "# Fitted by `meshplan calibrate`; read by meshplan.training.time.constants.\n"
                 + yaml.safe_dump(doc, sort_keys=False), "--out")
    _report(doc["fit"], out)


def _calibrate_site(files: list[Path], name: str, out: Path | None, quiet: bool) -> None:
    """Fit a site profile on the runs of `files` (bad records skipped and reported)."""
    from meshplan.calibration.site import save_site, site_path
    from meshplan.calibration.site_fit import calibrate_site
    from meshplan.validate.records import read_records

    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"--site {name!r}: give a plain name such as my-cluster")
    records, unreadable = [], []
    for path in files:
        good, bad = read_records(path)
        records += good
        unreadable += bad
    with progress(f"fitting site profile {name} on {len(records)} runs", show_progress(quiet)):
        doc = calibrate_site(records, name, [p.name for p in files])
    doc["fitted"]["skipped"] = [{"id": i, "reason": why} for i, why in unreadable] + doc["fitted"]["skipped"]
    path = save_site(doc, out or site_path(name))
    _report_site(doc, path)


def _report_site(doc: dict, path: Path) -> None:
    fitted = doc["fitted"]
    console.print(f"site profile {doc['site']} fitted on {fitted['runs']} runs -> {path}", highlight=False)
    for kind, values in doc["constants"].items():
        for name, value in values.items():
            shown = ", ".join(f"{g} {v:.3f}" for g, v in value.items()) if isinstance(value, dict) else f"{value:.3f}"
            console.print(f"  {kind}.{name}: {shown}", highlight=False)
    errors = doc["errors"]
    console.print(f"on these runs: before {_fmt(errors['before'])}; after {_fmt(errors['after'])}", highlight=False)
    for skip in fitted["skipped"]:
        console.print(f"skipped {skip['id']}: {skip['reason']}", highlight=False)


def _report(fit: dict, out: Path) -> None:
    console.print(f"fitted on {fit['records']} records -> {out}", highlight=False)
    console.print(f"in-sample: {_fmt(fit['in_sample'])}", highlight=False)
    if "leave_one_source_out" in fit:
        console.print(f"leave-one-source-out: {_fmt(fit['leave_one_source_out'])}", highlight=False)


def _fmt(s: dict) -> str:
    return f"median |err| {s['median_abs_rel_error']:.1%}, p90 |err| {s['p90_abs_rel_error']:.1%}"


def register(app: typer.Typer) -> None:
    """Add the `calibrate` command."""
    app.command("calibrate")(user_errors(calibrate))
