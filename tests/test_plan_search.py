"""Training plan search: only fitting, supported plans; ranking by objective; pins; CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.training import TrainingPlan
from meshplan.training.search.plans import search, why_winner

L70 = load_model("llama-3.1-70b")
MIXTRAL = load_model("mixtral-8x7b")
runner = CliRunner()


def run_search(model=L70, gpus=64, pinned=None, **fields):
    base = TrainingPlan(seq_len=4096, global_batch_size=128, **fields)
    return search(model, Cluster.build("h100-sxm-80gb", gpus), base, pinned or {})


def test_every_ranked_plan_fits_and_is_sorted():
    result = run_search()
    assert result.ranked
    assert all(e.memory.fits for e in result.ranked)
    speeds = [e.tokens_per_s_per_gpu for e in result.ranked]
    assert speeds == sorted(speeds, reverse=True)
    assert result.evaluated >= len(result.ranked) and result.rejected_memory > 0


def test_pins_are_respected():
    result = run_search(pinned={"tp": 8, "recompute": "full"})
    assert {(e.plan.tp, e.plan.recompute) for e in result.ranked} == {(8, "full")}


def test_framework_restricts_the_space():
    result = run_search(model=load_model("llama-3.1-8b"), gpus=16, framework="deepspeed")
    assert all(e.plan.tp == 1 and e.plan.pp == 1 for e in result.ranked)
    assert {e.plan.dp_sharding for e in result.ranked} <= {"optimizer", "gradients", "full"}


def test_moe_search_uses_expert_parallelism():
    result = run_search(model=MIXTRAL, gpus=64)
    assert any(e.plan.ep > 1 for e in result.ranked)


def test_winner_reason_names_the_margin():
    assert "faster than the runner-up" in why_winner(run_search())


def test_cost_objective_ranks_by_dollars_per_token():
    result = search(L70, Cluster.build("h100-sxm-80gb", 64),
                    TrainingPlan(seq_len=4096, global_batch_size=128), {}, objective="cost",
                    price_per_gpu_hour=2.0)
    assert list(result.scores) == sorted(result.scores)


def test_cli_json_and_counts():
    result = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-70b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "64", "--seq-len", "4096",
                                 "--global-batch-size", "128", "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["plans"]) == 3
    for key in ("tp", "pp", "tokens_per_s_per_gpu", "step_time_s", "mfu", "peak_bytes"):
        assert key in data["plans"][0]
    for key in ("evaluated", "feasible", "seconds"):
        assert key in data["search"]


def test_cli_compares_cluster_sizes():
    result = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-8b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "8,16", "--global-batch-tokens",
                                 "1048576", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "8 x h100-sxm-80gb" in result.stdout and "16 x h100-sxm-80gb" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--objective", "fastest"], "--objective 'fastest'"),
    (["--num-gpus", "lots"], "--num-gpus 'lots'"),
])
def test_cli_bad_flags_exit_2(args, message):
    base = ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
            "--num-gpus", "8", "--global-batch-size", "64"]
    result = runner.invoke(app, base + args if "--num-gpus" not in args else
                           ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                            "--global-batch-size", "64", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_sweep_writes_one_row_per_cell(tmp_path):
    import csv

    out = tmp_path / "sweep.csv"
    result = runner.invoke(app, ["train", "sweep", "--models", "llama-3.1-8b,llama-3.2-1b", "--gpus",
                                 "h100-sxm-80gb", "--num-gpus", "8", "--seq-lens", "2048",
                                 "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2
    by_model = {r["model"]: r for r in rows}
    assert by_model["llama-3.1-8b"]["status"] == "ok"
    assert float(by_model["llama-3.1-8b"]["tokens_per_s_per_gpu"]) > 0
    assert by_model["llama-3.2-1b"]["status"] == "ok"  # an unknown name: tests/test_flag_conflicts.py
    for row in rows:  # the p10-p90 band and the out-of-regime reasons (meshplan.bands)
        assert 0 < float(row["tokens_per_s_low"]) < float(row["tokens_per_s_high"])
    assert by_model["llama-3.1-8b"]["extrapolating"] == ""  # Megatron dense bf16 on Hopper: calibrated


def test_no_fitting_plan_shows_the_closest_and_why():
    result = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-405b", "--gpu",
                                 "h100-sxm-80gb", "--num-gpus", "16", "--global-batch-size", "64"])
    assert result.exit_code == 1, result.output  # answered: no feasible plan
    assert "no plan fits" in result.stdout
    assert "closest:" in result.stdout and "GiB over" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--num-gpus", "8", "--tp", "8", "--pp", "8"], "pinned tp=8 x pp=8 = 64 does not divide --num-gpus 8"),
    (["--num-gpus", "8", "--framework", "jax"], "--framework 'jax'"),
    (["--num-gpus", "0"], "--num-gpus '0': give positive whole numbers"),
])
def test_conflicting_or_unknown_inputs_exit_2(args, message):
    result = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-8b", "--gpu",
                                 "h100-sxm-80gb", "--global-batch-size", "64", *args])
    assert result.exit_code == 2
    assert message in result.stderr


SANITY_RECORDS = ("nemo2407-pretrain-llama2-7b", "mbridge-25.11-pretrain-llama3-8b-h100-8gpu-fp8-cs",
                  "torchtitan-t3-llama31-8b-128gpu-fsdp")


@pytest.mark.parametrize("record_id", SANITY_RECORDS)
def test_search_matches_or_beats_published_layouts(record_id):
    # The published layout of a vendor-tuned recipe must not beat meshplan's pick under
    # meshplan's own model (benchmarks/plan_sanity.py runs this over every record: 99/99).
    from meshplan.training.choose import best_plan
    from meshplan.validate.records import load_records
    from meshplan.validate.training_records import training_case
    from tests.conftest import RECORDS

    path = RECORDS / "training-calibration.yaml"
    record = next(r for r in load_records(path) if r.id == record_id)
    case = training_case(record)
    published = best_plan(case.plan, case.model, case.cluster)
    base = case.plan.model_copy(update={"tp": 1, "pp": 1, "vpp": None, "cp": 1, "ep": 1, "dp": None,
                                        "micro_batch_size": None, "pipeline_split": None})
    best = search(case.model, case.cluster, base, {}, top=1).ranked[0]
    assert best.tokens_per_s_per_gpu >= 0.999 * published.tokens_per_s_per_gpu


def test_why_better_quotes_the_real_edge_of_a_plan_with_the_same_mix():
    # Two compute-bound plans (99% of each step computing), one 30% faster: the line used to
    # say "largest edge 0.0% less of the step"; it now quotes the time per token saved.
    from types import SimpleNamespace

    from meshplan.training.search.plans import time_saved, why_better

    def est(tokens, step):
        return SimpleNamespace(tokens_per_s_per_gpu=tokens, step_time_s=step,
                               breakdown={"compute": 0.99 * step, "optimizer": 0.01 * step})

    fast, slow = est(1300.0, 1.0), est(1000.0, 1.3)
    saved = time_saved(fast, slow)
    assert sum(saved.values()) == pytest.approx(1 - 1000 / 1300)
    assert saved["compute"] == pytest.approx(0.99 * (1 - 1000 / 1300))
    assert why_better(fast, slow) == ("the best plan is 30.0% faster than the runner-up; its largest "
                                      "edge: 22.8% of the runner-up's time per token saved in compute")
