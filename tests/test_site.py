"""Site profiles (meshplan.calibration.site, meshplan.calibration.site_fit): fitting a few
multipliers on a user's own runs, saving them outside the package, and applying them with --site /
MESHPLAN_SITE / site=."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import meshplan
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.calibration.site import active_site, load_site, site_path, use_site

from tests.conftest import RECORDS

runner = CliRunner()
ESTIMATE = ["train", "estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
            "--global-batch-size", "64", "--seq-len", "8192", "--recompute", "full", "--json"]


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHPLAN_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("MESHPLAN_SITE", raising=False)
    yield tmp_path / "cfg"
    use_site(None)


def records_file(tmp_path, prefix: str, kind: str = "training", n: int = 3, edit=None) -> Path:
    """A run-record file with the first `n` calibration records whose id starts with `prefix`."""
    data = yaml.safe_load((RECORDS / f"{kind}-calibration.yaml").read_text())
    records = [r for r in data["records"] if r["id"].startswith(prefix)][:n]
    if edit:
        edit(records)
    path = tmp_path / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "records": records}))
    return path


def tokens(*extra: str) -> float:
    result = runner.invoke(app, ESTIMATE + list(extra))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["tokens_per_s_per_gpu"]


def test_calibrate_site_fits_saves_outside_the_package_and_applies(tmp_path, config_dir):
    runs = records_file(tmp_path, "dgxc-2504-llama31-8b")
    fitted = runner.invoke(app, ["calibrate", "--site", "lab", str(runs)])
    assert fitted.exit_code == 0, fitted.output
    profile = load_site("lab")
    assert profile.path == str(site_path("lab")) and site_path("lab").parent == config_dir / "sites"
    doc = yaml.safe_load(site_path("lab").read_text())
    assert doc["errors"]["after"]["median_abs_rel_error"] < doc["errors"]["before"]["median_abs_rel_error"]
    compute = profile.factor("training", "compute", "h100-sxm-80gb")
    assert 0.8 < compute < 1.0  # the packaged model is ~8% slow on these runs; the prior holds it back
    plain, sited = tokens(), tokens("--site", "lab")
    assert sited > plain * 1.03
    with_env = runner.invoke(app, ESTIMATE, env={"MESHPLAN_SITE": "lab"})
    assert json.loads(with_env.stdout)["tokens_per_s_per_gpu"] == pytest.approx(sited)
    assert "site profile: lab" in with_env.stderr
    assert active_site() is None  # the CLI restores the packaged model after the command


def test_one_run_moves_a_constant_only_part_of_the_way(tmp_path):
    runs = records_file(tmp_path, "dgxc-2504-llama31-8b", n=1)
    assert runner.invoke(app, ["calibrate", "--site", "one", str(runs), "--out", str(tmp_path / "one.yaml")]).exit_code == 0
    doc = yaml.safe_load((tmp_path / "one.yaml").read_text())
    after = [abs(r["after"]) for r in doc["errors"]["runs"]]
    before = [abs(r["before"]) for r in doc["errors"]["runs"]]
    assert 0.2 * min(before) < min(after) < 0.8 * min(before)  # MAP with a prior at 1, not a full match


def test_bad_runs_are_skipped_and_reported(tmp_path):
    def broken(records):
        records[0]["measured"]["tokens_per_s_per_gpu"] *= 20  # above any MFU the GPU allows
        records[1]["training"]["tp"] = 3  # a layout that does not divide
    runs = records_file(tmp_path, "dgxc-2504-llama31-8b", edit=broken)
    result = runner.invoke(app, ["calibrate", "--site", "lab", str(runs)])
    assert result.exit_code == 0, result.output
    skipped = yaml.safe_load(site_path("lab").read_text())["fitted"]["skipped"]
    reasons = " ".join(s["reason"] for s in skipped)
    assert len(skipped) == 2 and "measured.tokens_per_s_per_gpu" in reasons and "tp=3" in reasons


def test_serving_profile_changes_the_simulated_deployment(tmp_path):
    runs = records_file(tmp_path, "trtllm-0.13-h100-fp8-llama-3-8b", kind="serving", n=2)
    assert runner.invoke(app, ["calibrate", "--site", "srv", str(runs)]).exit_code == 0
    profile = load_site("srv")
    assert profile.serving and set(profile.gpus("serving")) == {"h100-sxm-80gb"}
    base = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "50",
            "--input-len", "256", "--output-len", "64", "--json"]
    plain = json.loads(runner.invoke(app, base).stdout)["metrics"]["output_tokens_per_s"]
    sited = json.loads(runner.invoke(app, base + ["--site", "srv"]).stdout)["metrics"]["output_tokens_per_s"]
    assert sited != pytest.approx(plain, rel=1e-3)


def test_another_gpu_is_predicted_without_its_factor_and_said(tmp_path):
    runs = records_file(tmp_path, "dgxc-2504-llama31-8b")
    runner.invoke(app, ["calibrate", "--site", "lab", str(runs)])
    other = [a if a != "h100-sxm-80gb" else "a100-sxm-80gb" for a in ESTIMATE]
    result = runner.invoke(app, other + ["--site", "lab"])
    assert "fitted on h100-sxm-80gb, not a100-sxm-80gb" in result.stderr
    assert json.loads(result.stdout)["tokens_per_s_per_gpu"] == pytest.approx(
        json.loads(runner.invoke(app, other).stdout)["tokens_per_s_per_gpu"], rel=0.02)


def test_the_api_takes_site(tmp_path):
    runs = records_file(tmp_path, "dgxc-2504-llama31-8b")
    runner.invoke(app, ["calibrate", "--site", "lab", str(runs)])
    cluster = meshplan.Cluster.build("h100-sxm-80gb", 8)
    plan = meshplan.TrainingPlan(global_batch_size=64, seq_len=8192, recompute="full")
    plain = meshplan.estimate_training("llama-3.1-8b", cluster, plan)
    sited = meshplan.estimate_training("llama-3.1-8b", cluster, plan, site="lab")
    assert sited.tokens_per_s_per_gpu > plain.tokens_per_s_per_gpu
    assert active_site() is None


@pytest.mark.parametrize("constants, message", [
    ({"training": {"flops": 1.1}}, "constants.training.flops is not a site constant; valid: compute"),
    ({"training": {"intra_network": 9.0}}, "expected a multiplier in [0.25, 4.0]"),
    ({"training": {"compute": 1.1}}, "expected a mapping of GPU name to multiplier"),
    ({"inference": {}}, "expected training or serving"),
])
def test_bad_profiles_name_the_field(tmp_path, constants, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"site": "bad", "constants": constants}))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_site(path)


def test_a_renamed_constant_loads_with_a_note(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"site": "old", "constants": {"serving": {"host": 1.2}}}))
    profile = load_site(path)
    assert profile.factor("serving", "step") == 1.2
    assert "serving.host is now called serving.step" in profile.notes[0]


def test_an_unknown_profile_is_one_error_line():
    result = runner.invoke(app, ESTIMATE + ["--site", "nowhere"])
    assert result.exit_code == 2 and "site profile 'nowhere': no such profile" in result.stderr


def test_round_trip_record_calibrate_plan(tmp_path):
    """A user's cluster runs 15% slower than the packaged model says: three runs written with
    `meshplan record training`, a profile fitted on them, and `train plan --site` then predicts
    the slower cluster for a layout it never saw."""
    runs = tmp_path / "mine.yaml"
    shapes = [("llama-3.1-8b", 8, "8192"), ("llama-3.1-8b", 16, "8192"), ("llama-3.1-70b", 32, "4096")]
    for model, gpus, seq in shapes:
        base = ["--model", model, "--gpu", "h100-sxm-80gb", "--num-gpus", str(gpus), "--seq-len", seq,
                "--global-batch-size", str(4 * gpus), "--recompute", "full"]
        predicted = runner.invoke(app, ["train", "estimate", *base, "--tp", "8" if gpus == 32 else "1", "--json"])
        measured = json.loads(predicted.stdout)["tokens_per_s_per_gpu"] * 0.85
        recorded = runner.invoke(app, ["record", "training", "--out", str(runs), *base, "--framework", "megatron",
                                       "--tp", "8" if gpus == 32 else "1", "--tokens-per-s-per-gpu", f"{measured:.1f}"])
        assert recorded.exit_code == 0, recorded.output
    assert runner.invoke(app, ["calibrate", "--site", "slow", str(runs)]).exit_code == 0
    assert 1.05 < load_site("slow").factor("training", "compute", "h100-sxm-80gb") < 1.18
    plan = ["train", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64",
            "--seq-len", "8192", "--global-batch-size", "128", "--top", "1", "--json", "--quiet"]
    plain = json.loads(runner.invoke(app, plan).stdout)["plans"][0]["tokens_per_s_per_gpu"]
    sited = runner.invoke(app, plan + ["--site", "slow"])
    assert "site profile: slow" in sited.stderr
    assert 0.84 < json.loads(sited.stdout)["plans"][0]["tokens_per_s_per_gpu"] / plain < 0.97
