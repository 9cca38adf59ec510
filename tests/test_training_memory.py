"""Memory per GPU: model states by sharding, schedules' in-flight micro-batches, logits, CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan
from meshplan.training.pipeline.schedules import in_flight_chunks

L8 = load_model("llama-3.1-8b")
L70 = load_model("llama-3.1-70b")
runner = CliRunner()


def estimate(model=L8, gpus=8, **fields):
    cluster = Cluster.build("h100-sxm-80gb", gpus)
    return estimate_memory(model, cluster, resolve_plan(TrainingPlan(**fields), model, cluster))


def test_fsdp_shards_sixteen_bytes_per_parameter():
    # torchtitan FSDP2: fp32 params (= master), fp32 grads, Adam's two fp32 moments, all sharded
    stage = estimate(framework="torchtitan", dp_sharding="full").stages[0]
    states = (stage.weights_bytes + stage.gradients_bytes + stage.master_weights_bytes
              + stage.optimizer_bytes)
    assert states == pytest.approx(16 * L8.params_total / 8, rel=1e-3)


def test_distributed_optimizer_shards_only_master_and_moments():
    stage = estimate(framework="megatron", dp_sharding="optimizer").stages[0]
    n = L8.params_total
    assert stage.weights_bytes == pytest.approx(2 * n, rel=1e-3)
    assert stage.gradients_bytes == pytest.approx(4 * n, rel=1e-3)  # fp32 main grads
    assert stage.master_weights_bytes + stage.optimizer_bytes == pytest.approx(12 * n / 8, rel=1e-3)


def test_ddp_replicates_everything():
    stage = estimate(framework="megatron", dp_sharding="none").stages[0]
    assert stage.optimizer_bytes == pytest.approx(8 * L8.params_total, rel=1e-3)


@pytest.mark.parametrize("schedule, stage, expected", [
    ("1f1b", 0, 4), ("1f1b", 3, 1), ("gpipe", 0, 16), ("zero-bubble", 0, 4),
])
def test_in_flight_microbatches(schedule, stage, expected):
    assert in_flight_chunks(schedule, stage, pp=4, vpp=1, m=16) == expected


def test_interleaved_warmup_matches_megatron():
    # Megatron: 2 (pp - r - 1) + (vpp - 1) pp warm-up chunks, plus the one in steady state
    assert in_flight_chunks("interleaved", 0, pp=4, vpp=2, m=16) == 2 * 3 + 4 + 1
    assert in_flight_chunks("interleaved", 3, pp=4, vpp=2, m=16) == 4 + 1


def test_first_stage_holds_the_most_activations_and_last_the_logits():
    est = estimate(model=L70, gpus=64, tp=8, pp=4, global_batch_size=64, seq_len=8192)
    acts = [s.activations_bytes for s in est.stages]
    assert acts == sorted(acts, reverse=True)
    assert est.stages[-1].logits_bytes > 0 and est.stages[0].logits_bytes == 0


def test_full_recompute_keeps_only_layer_inputs():
    plain = estimate(seq_len=8192, framework="megatron").stages[0].activations_bytes
    full = estimate(seq_len=8192, framework="megatron", recompute="full").stages[0].activations_bytes
    assert full < plain / 5


def test_fits_flag_and_verdict():
    assert estimate(framework="megatron", dp_sharding="optimizer", seq_len=2048).fits
    assert not estimate(model=L70, gpus=8, framework="megatron", dp_sharding="none").fits


def test_cli_json_fields():
    result = runner.invoke(app, ["train", "memory", "--model", "llama-3.1-8b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "8", "--seq-len", "8192", "--json"])
    data = json.loads(result.stdout)
    assert result.exit_code == (0 if data["fits"] else 1), result.output
    for key in ("activation_bytes_per_layer", "stages", "peak_bytes", "gpu_memory_bytes", "fits"):
        assert key in data
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "other_bytes", "total_bytes"):
        assert key in data["stages"][0]
    assert data["peak_bytes"] == max(s["total_bytes"] for s in data["stages"])


def test_cli_table_says_does_not_fit_by_how_much():
    result = runner.invoke(app, ["train", "memory", "--model", "llama-3.1-70b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "8", "--dp-sharding", "none"])
    assert result.exit_code == 1, result.output  # answered: does not fit
    assert "DOES NOT FIT" in result.stdout and "GiB over" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--tp", "3"], "tp=3 x cp=1 x pp=1 = 3 does not divide num_gpus=8"),
    (["--recompute", "sometimes"], "--recompute 'sometimes': Input should be 'none', 'selective' or 'full'"),
    (["--micro-batch-size", "3", "--global-batch-size", "10"], "is not a multiple of micro_batch_size=3"),
    (["--pipeline-split", "a,b"], "expected comma-separated layer counts"),
])
def test_cli_bad_plans_exit_2(args, message):
    result = runner.invoke(app, ["train", "memory", "--model", "llama-3.1-8b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "8", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
