"""The run records ship with the package (meshplan.records) and `validate`/`calibrate` reach them
by name; `meshplan --version` prints the package's version."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

import meshplan
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.records import CALIBRATION, HELD_OUT, MICROBENCH, SCHEMA, SETS, record_set, with_set

runner = CliRunner()


def test_the_records_and_their_schema_are_in_the_package():
    for path in (*CALIBRATION.values(), MICROBENCH, SCHEMA, *SETS["held-out"]):
        assert path.is_file() and path.is_relative_to(meshplan.records.HERE), path
    assert SETS["held-out"], "the held-out set is empty"


def test_held_out_records_never_share_an_id_with_calibration():
    def ids(path):
        return {r["id"] for r in yaml.safe_load(path.read_text())["records"]}

    calibration = ids(CALIBRATION["training"]) | ids(CALIBRATION["serving"])
    for path in HELD_OUT.glob("*.yaml"):
        assert not ids(path) & calibration, path.name


def test_record_sets_by_name():
    assert with_set(None, None, default="builtin") == [CALIBRATION["training"], CALIBRATION["serving"]]
    assert with_set(None, "held-out") == list(SETS["held-out"])
    mine = meshplan.records.HERE / "mine.yaml"
    assert with_set([mine], None, default="builtin") == [mine]  # files given: no default set
    assert with_set([mine], "serving") == [mine, CALIBRATION["serving"]]
    assert with_set(None, None) == []
    with pytest.raises(ConfigError, match="valid: builtin, training, serving, held-out, all"):
        record_set("nope")


def test_validate_names_an_unknown_set():
    result = runner.invoke(app, ["validate", "--records", "calib"])
    assert result.exit_code == 2
    assert "not a built-in record set" in result.output


def test_calibrate_needs_files_or_a_set(tmp_path):
    result = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "fit.yaml")])
    assert result.exit_code == 2
    assert "--records training|serving" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"meshplan {meshplan.__version__}\n"


def test_validate_without_files_reads_the_builtin_calibration_records(monkeypatch):
    import meshplan.cli.commands.validate as command

    seen = []
    monkeypatch.setattr(command, "predict", lambda records, *a: (seen.extend(records), ([], []))[1])
    result = runner.invoke(app, ["validate", "-q", "--workers", "1"])
    assert result.exit_code == 0, result.output
    kinds = {r.kind for r in seen}
    assert kinds == {"training", "serving"} and len(seen) > 600
    assert f"of {len(seen)} records" in result.output
