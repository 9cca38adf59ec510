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


def test_one_held_out_file_by_name():
    path = HELD_OUT / "serving-engines-2025.yaml"
    assert record_set("held-out/serving-engines-2025") == (path,)
    assert record_set("held-out/serving-engines-2025.yaml") == (path,)
    with pytest.raises(ConfigError, match="one held-out file: .*held-out/serving-engines-2025"):
        record_set("held-out/nope")
    with pytest.raises(ConfigError, match="not a built-in record set"):
        record_set("held-out/../serving-calibration")


def test_every_held_out_record_loads_and_names_where_it_came_from():
    from meshplan.validate.records import load_records

    for path in SETS["held-out"]:
        for r in load_records(path):  # the schema's checks (unknown keys, phase-pool metrics)
            cited = r.source.get("url") or (r.source.get("repo") and r.source.get("commit"))
            assert cited and r.source.get("where"), (path.name, r.id)


@pytest.mark.parametrize(("name", "engines"), [("serving-engines-2025", {"sglang", "tensorrt-llm", "vllm"}),
                                              ("serving-engines-2025b", {"sglang", "tensorrt-llm"})])
def test_engine_blog_records_cite_a_commit_and_state_their_pools(name, engines):
    """serving-engines-2025*.yaml: each record names the repository, commit and file it was read
    from and how its numbers were derived; a phase-pool record's GPUs are its pool's."""
    import re

    from meshplan.validate.records import load_records

    records = load_records(HELD_OUT / f"{name}.yaml")
    assert {r.serving.engine for r in records} == engines
    for r in records:
        assert re.fullmatch(r"[0-9a-f]{40}", r.source["commit"]) and r.source["path"].endswith(".md"), r.id
        assert r.notes and r.source["key"], r.id
        dis = r.serving.disaggregated
        if dis is not None:
            assert r.hardware.num_gpus == (dis.prefill_gpus or dis.decode_gpus), r.id
            assert r.serving.dp * r.serving.tp == r.hardware.num_gpus, r.id


def test_validate_reports_an_unrepresentable_held_out_record_with_its_reason():
    """A record the simulator cannot hold is a skip with the reason, never dropped: the GB200
    prefill instance that offloads weights to host memory does not fit without offload."""
    from meshplan.validate.records import load_records
    from meshplan.validate.run import predict

    by_id = {r.id: r for r in load_records(HELD_OUT / "serving-engines-2025.yaml")}
    picked = [by_id["lmsys-sglang-gb200-dsr1-prefill-fp4-2gpu-2k"], by_id["trtllm-blog1-b200-dsr1-c1-baseline-ep8tp8"]]
    rows, skips = predict(picked, workers=1)
    assert [s.id for s in skips] == ["lmsys-sglang-gb200-dsr1-prefill-fp4-2gpu-2k"]
    assert "does not fit" in skips[0].reason
    assert [(r.id, r.metric) for r in rows] == [("trtllm-blog1-b200-dsr1-c1-baseline-ep8tp8", "tpot_ms_mean")]
