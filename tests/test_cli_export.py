"""`meshplan train export`: from `train plan --json` output or a plan file to launch configs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from tests.test_export import titan_flags

runner = CliRunner()
PLAN = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
        "plan": {"tp": 1, "pp": 1, "dp_sharding": "full", "micro_batch_size": 2,
                 "global_batch_size": 64, "seq_len": 8192, "recompute": "selective",
                 "framework": "torchtitan"}}


def export(tmp_path, target, data):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return runner.invoke(app, ["train", "export", "--target", target, "--plan", str(path)])


def test_search_output_exports_to_megatron(tmp_path):
    search = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-70b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "64", "--seq-len", "4096",
                                 "--global-batch-size", "64", "--json"])
    data = json.loads(search.stdout)
    result = export(tmp_path, "megatron", data)
    assert result.exit_code == 0, result.output
    best = data["plans"][0]
    assert f"--tensor-model-parallel-size {best['tp']}" in result.stdout
    assert f"--pipeline-model-parallel-size {best['pp']}" in result.stdout


def test_plan_file_exports_to_torchtitan_and_deepspeed(tmp_path):
    titan = export(tmp_path, "torchtitan", PLAN)
    assert titan.exit_code == 0, titan.output
    assert titan_flags(titan.stdout)["--parallelism.data_parallel_shard_degree"] == "16"
    ds = export(tmp_path, "deepspeed", {**PLAN, "plan": {**PLAN["plan"], "framework": "deepspeed",
                                                         "recompute": "full"}})
    assert ds.exit_code == 0, ds.output
    assert json.loads(ds.stdout)["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize("target, data, message", [
    ("megatorn", PLAN, "unknown export target 'megatorn'; closest: megatron"),
    ("megatron", {"model": "llama-3.1-8b"}, "expected keys model, hardware and plan"),
    ("megatron", {"plans": []}, "'plans' is empty"),
])
def test_bad_export_requests_exit_2(tmp_path, target, data, message):
    result = export(tmp_path, target, data)
    assert result.exit_code == 2
    assert message in result.stderr


MEGATRON_PLAN = {**PLAN, "plan": {"tp": 2, "pp": 1, "dp_sharding": "optimizer", "micro_batch_size": 1,
                                  "global_batch_size": 64, "seq_len": 8192, "recompute": "none",
                                  "sequence_parallel": True, "tp_comm_overlap": True,
                                  "framework": "megatron"}}


def test_index_picks_the_nth_plan_and_names_the_count(tmp_path):
    plans = {"plans": [PLAN, {**PLAN, "plan": {**PLAN["plan"], "micro_batch_size": 1}}]}
    second = export_args(tmp_path, plans, "torchtitan", "--index", "2")
    assert second.exit_code == 0, second.output
    assert titan_flags(second.stdout)["--training.local_batch_size"] == "1"
    beyond = export_args(tmp_path, plans, "torchtitan", "--index", "9")
    assert beyond.exit_code == 2 and "holds 2 plans; give 1 to 2" in beyond.stderr


def test_megatron_default_sharding_is_retargeted_to_torchtitans_and_said(tmp_path):
    result = export(tmp_path, "torchtitan", MEGATRON_PLAN)
    assert result.exit_code == 0, result.output
    assert "dp_sharding: 'optimizer' (megatron's default) -> 'full' (torchtitan's default)" in result.stderr
    flags = titan_flags(result.stdout)
    assert flags["--parallelism.tensor_parallel_degree"] == "2"
    assert flags["--parallelism.data_parallel_shard_degree"] == "8"


def test_explicit_fields_without_equivalent_are_all_listed(tmp_path):
    data = {**MEGATRON_PLAN, "plan": {**MEGATRON_PLAN["plan"], "recompute": "selective"}}
    result = export(tmp_path, "deepspeed", data)
    assert result.exit_code == 2
    assert "cannot be re-targeted to deepspeed" in result.stderr
    assert "tp=2: deepspeed has no tp; use 1" in result.stderr
    assert "recompute='selective': deepspeed offers none, full" in result.stderr


def test_a_nemo_plan_exports_to_megatron_as_it_is(tmp_path):
    data = {**MEGATRON_PLAN, "plan": {**MEGATRON_PLAN["plan"], "framework": "nemo"}}
    result = export(tmp_path, "megatron", data)
    assert result.exit_code == 0 and not result.stderr
    assert "--use-distributed-optimizer" in result.stdout and "--tp-comm-overlap" in result.stdout


def export_args(tmp_path, data, target, *extra):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(data))
    return runner.invoke(app, ["train", "export", "--target", target, "--plan", str(path), *extra])
