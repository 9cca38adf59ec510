"""Goodput at scale (meshplan.goodput): interruption rates from Llama 3's Table 5, checkpoint
size and Young/Daly interval, stragglers, and the published figures they are checked against
(sources in src/meshplan/goodput/data/reliability.yaml)."""

from __future__ import annotations

import math

import pytest

from meshplan import Cluster, load_model
from meshplan.goodput import Resilience, goodput
from meshplan.goodput.checkpoint import checkpoint_bytes, young_daly_interval_s
from meshplan.goodput.data import published, reliability
from meshplan.goodput.failures import exposure, interruptions_per_hour
from meshplan.goodput.stragglers import expected_max_z, straggler_slowdown
from meshplan.training import TrainingPlan
from meshplan.training.choose import best_plan

SNAPSHOT_DAYS = 54
TOLERANCE = 0.05
"""The 54-day prediction must land within 5% of the 466 published interruptions."""


@pytest.fixture(scope="module")
def llama405b():
    model = load_model("llama-3.1-405b")
    cluster = Cluster.build("h100-sxm-80gb", 16384, gpus_per_node=8)
    plan = TrainingPlan(tp=8, pp=8, vpp=8, cp=2, seq_len=8192, global_batch_size=2048)
    est = best_plan(plan, model, cluster)
    return model, cluster, est


def test_table5_counts_sum_to_the_unexpected_interruptions():
    counts = sum(sum(row["table5"].values()) for row in reliability()["components"])
    assert counts == published("unexpected interruptions in the 54-day snapshot") == 419
    assert counts + reliability()["planned"]["interruptions"] == 466


def test_54_day_snapshot_predicts_the_published_interruptions(llama405b):
    """Llama 3 405B on 16,384 H100 for 54 days: 466 interruptions (in-sample: the rates come
    from this snapshot, so this checks the scaling reproduces it) and ETTR above 90%."""
    model, cluster, est = llama405b
    g = goodput(model, cluster, est.plan, est.step_time_s)
    per_day = g.detail_dict()["interruptions_per_day"]
    predicted = per_day * SNAPSHOT_DAYS
    assert predicted == pytest.approx(published("interruptions in the 54-day snapshot"),
                                      rel=TOLERANCE)
    assert g.effective_training_time_ratio > published("effective training time ratio (lower bound)")


def test_405b_gpu_hours_near_the_model_card(llama405b):
    """15.6T tokens (paper) against the card's 30.84M H100-hours: within 15% (the card also
    counts the 8K-then-128K context stages and the smaller early batches the plan omits)."""
    model, cluster, est = llama405b
    g = goodput(model, cluster, est.plan, est.step_time_s, train_tokens=15.6e12)
    gpu_hours = g.to_dict()["days_to_train"] * 24 * cluster.num_gpus
    assert gpu_hours == pytest.approx(published("Llama 3.1 405B H100-hours"), rel=0.15)


def test_rates_scale_with_gpus_nodes_and_links():
    big = interruptions_per_hour(exposure(16384, 8))
    half = interruptions_per_hour(exposure(8192, 8))
    single = interruptions_per_hour(exposure(8, 8))
    assert half["gpu"] == pytest.approx(big["gpu"] / 2)
    assert half["host"] == pytest.approx(big["host"] / 2)
    assert single["switch_cable"] == single["nic"] == 0.0  # no scale-out links on one node
    assert single["planned"] == big["planned"]  # maintenance interrupts any job daily


def test_checkpoint_is_weights_master_and_adam_once(llama405b):
    model, cluster, est = llama405b
    assert checkpoint_bytes(model, est.plan) == pytest.approx(model.params_total * (2 + 4 + 8))
    # Llama 3 reports 1 MB to 4 GB of checkpoint state per GPU
    per_rank = goodput(model, cluster, est.plan, est.step_time_s).checkpoint.bytes_per_rank
    assert 1e6 <= per_rank <= 4e9


def test_young_daly_interval():
    assert young_daly_interval_s(2.0, 10_000.0) == pytest.approx(200.0)
    assert math.isinf(young_daly_interval_s(2.0, math.inf))


def test_async_pays_only_the_copy_and_spares_and_restarts_move_ettr(llama405b):
    model, cluster, est = llama405b
    sync = goodput(model, cluster, est.plan, est.step_time_s, 15.6e12)
    asynchronous = goodput(model, cluster, est.plan, est.step_time_s, 15.6e12,
                           Resilience(checkpoint_mode="async"))
    assert asynchronous.checkpoint.stall_s < sync.checkpoint.stall_s
    assert asynchronous.checkpoint_interval_s < sync.checkpoint_interval_s
    slow = goodput(model, cluster, est.plan, est.step_time_s, 15.6e12,
                   Resilience(reschedule_s=3600.0))
    spared = goodput(model, cluster, est.plan, est.step_time_s, 15.6e12,
                     Resilience(reschedule_s=3600.0, hot_spare_nodes=4))
    assert slow.effective_training_time_ratio < spared.effective_training_time_ratio
    assert spared.spare_gpus == 32


def test_stragglers_grow_with_the_log_of_n():
    assert expected_max_z(1) == 0.0
    assert expected_max_z(16384) == pytest.approx(3.9, abs=0.15)  # ~ sqrt(2 ln N) less a bias
    assert straggler_slowdown(16384, 0.02) > straggler_slowdown(1024, 0.02) > 0


def test_waterfall_adds_up_to_the_wall_clock(llama405b):
    model, cluster, est = llama405b
    g = goodput(model, cluster, est.plan, est.step_time_s, 15.6e12)
    assert sum(g.waterfall().values()) == pytest.approx(g.wall_s, rel=1e-9)
    assert set(g.to_dict()) == {"expected_interruptions", "checkpoint_interval_s",
                                "effective_training_time_ratio", "days_to_train"}


def test_time_to_train_search_ranks_by_the_effective_wall_clock():
    """The search's time-to-train score is goodput's days_to_train of each ranked plan, and a
    slower restart makes every plan's score longer (the same ranking key as `train plan`)."""
    from meshplan.training.search.plans import search

    model = load_model("llama-3.1-8b")
    cluster = Cluster.build("h100-sxm-80gb", 64, gpus_per_node=8)
    base = TrainingPlan(seq_len=4096, global_batch_size=256)
    result = search(model, cluster, base, {"tp": 1, "pp": 1}, objective="time-to-train",
                    train_tokens=1e12, top=2, workers=1)
    for est, score in zip(result.ranked, result.scores):
        days = goodput(model, cluster, est.plan, est.step_time_s, 1e12).to_dict()["days_to_train"]
        assert score == pytest.approx(days)
    slow = search(model, cluster, base, {"tp": 1, "pp": 1}, objective="time-to-train",
                  train_tokens=1e12, top=2, workers=1, resilience=Resilience(restart_s=3600.0))
    assert slow.scores[0] > result.scores[0]


def test_sweep_rows_carry_goodput():
    from meshplan.training.search.grid import COLUMNS, sweep_cell

    row = sweep_cell(("llama-3.1-8b", "h100-sxm-80gb", 8, 4096), 2**20, "megatron")
    assert set(row) <= set(COLUMNS) and row["status"] == "ok"
    assert 0.9 < row["effective_training_time_ratio"] < 1.0 and row["interruptions_per_day"] > 0


def test_cli_estimate_and_plan_print_the_goodput_block():
    import json

    from typer.testing import CliRunner

    from meshplan.cli.app import app

    args = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "16",
            "--global-batch-size", "64", "--train-tokens", "1e12", "--json"]
    out = CliRunner().invoke(app, ["train", "estimate", "--tp", "2", *args,
                                   "--checkpoint-mode", "async", "--hot-spare-nodes", "1"])
    assert out.exit_code == 0, out.output
    block = json.loads(out.stdout)["goodput"]
    assert set(block) == {"expected_interruptions", "checkpoint_interval_s",
                          "effective_training_time_ratio", "days_to_train"}
    assert block["days_to_train"] > 0 and 0 < block["effective_training_time_ratio"] < 1
    plan = CliRunner().invoke(app, ["train", "plan", *args, "--top", "1", "--objective",
                                    "time-to-train", "--tp", "2", "--pp", "1"])
    best = json.loads(plan.stdout)["plans"][0]
    assert best["score"] == pytest.approx(best["goodput"]["days_to_train"])
    bad = CliRunner().invoke(app, ["train", "estimate", *args, "--restart-minutes", "-1"])
    assert bad.exit_code != 0 and "--restart-minutes" in bad.output
