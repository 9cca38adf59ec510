"""--memory-headroom GiB: plans must leave that much GPU memory free (#34 item 6: winning plans sat
at 78/80 GiB with no way to keep a safety margin)."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.memory.total import estimate_memory, fits_memory

GIB = 2**30
runner = CliRunner()
MEMORY = ("train", "memory", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
          "--seq-len", "4096", "--global-batch-size", "64", "--tp", "2")
PLAN = ("train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
        "--seq-len", "8192", "--global-batch-size", "64", "--top", "5", "--workers", "1")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_train_memory_fits_only_with_the_headroom_free():
    data = json.loads(run(*MEMORY, "--json").stdout)
    free = data["headroom_bytes"] / GIB
    assert data["fits"] and free > 4
    kept = json.loads(run(*MEMORY, "--memory-headroom", f"{free - 2:.1f}", "--json").stdout)
    assert kept["fits"] and kept["memory_headroom_bytes"] == pytest.approx((free - 2) * GIB, rel=1e-3)
    short = run(*MEMORY, "--memory-headroom", f"{free + 2:.1f}")
    assert short.exit_code == 1, short.output
    assert "DOES NOT FIT" in short.stdout and f"less than the --memory-headroom {free + 2:.1f} GiB" in short.stdout


def test_library_fits_and_estimate_agree_on_the_headroom():
    """The search's fast check (fits_memory) and the full estimate use the same usable memory."""
    spec = load_model("llama-3.1-8b")
    for headroom in (0.0, 10.0, 30.0, 50.0):
        cluster = Cluster.build("h100-sxm-80gb", 8, memory_headroom_gib=headroom)
        plan = resolve_plan(TrainingPlan(seq_len=4096, global_batch_size=64, micro_batch_size=2), spec, cluster)
        est = estimate_memory(spec, cluster, plan)
        assert est.fits == fits_memory(spec, cluster, plan)
        assert est.fits == (est.peak_bytes <= cluster.gpu.hbm_bytes - headroom * GIB)


def test_train_plan_ranks_only_plans_that_leave_the_headroom_free():
    plain = json.loads(run(*PLAN, "--json").stdout)["plans"]
    cap = 79.6 * GIB
    assert max(p["peak_bytes"] for p in plain) > cap - 20 * GIB  # without it, plans sit near the top
    kept = json.loads(run(*PLAN, "--memory-headroom", "20", "--json").stdout)["plans"]
    assert kept and all(p["peak_bytes"] <= p["gpu_memory_bytes"] - 20 * GIB for p in kept)


def test_train_sweep_keeps_the_headroom(tmp_path):
    out = tmp_path / "s.csv"
    args = ("train", "sweep", "--models", "llama-3.1-8b", "--gpus", "h100-sxm-80gb", "--num-gpus", "8",
            "--seq-lens", "8192", "--workers", "1", "--out", out)
    result = run(*args, "--memory-headroom", "30")
    assert result.exit_code == 0, result.output
    (row,) = list(csv.DictReader(out.open()))
    assert row["status"] == "ok" and int(row["peak_bytes"]) <= (79.6 - 30) * GIB


def test_serve_plan_lowers_the_memory_utilization_to_keep_the_headroom():
    args = ("serve", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--request-rate", "2",
            "--num-requests", "60", "--slo-ttft-ms", "1000", "--workers", "1", "--no-disaggregation", "--json")
    plain = json.loads(run(*args).stdout)["plans"]
    assert plain and all(p["plan"]["gpu_memory_utilization"] is None for p in plain)
    kept = json.loads(run(*args, "--memory-headroom", "20").stdout)["plans"]
    cap = 1 - 20 * GIB / Cluster.build("h100-sxm-80gb", 1).gpu.hbm_bytes
    assert kept and all(p["plan"]["gpu_memory_utilization"] == pytest.approx(cap, abs=1e-4) for p in kept)


@pytest.mark.parametrize("value, words", [("-1", ("--memory-headroom", "0 GiB or more")),
                                          ("100", ("--memory-headroom", "less than", "79.6 GiB"))])
def test_impossible_headroom_is_one_clear_error(value, words):
    result = run(*MEMORY, "--memory-headroom", value)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith("error:") and "\n" not in line
    for word in words:
        assert word in line, (word, line)


def test_a_search_where_nothing_fits_says_the_headroom_was_kept():
    result = run("train", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
                 "--seq-len", "8192", "--global-batch-size", "64", "--workers", "1", "--memory-headroom", "60")
    assert result.exit_code == 1, result.output
    closest = [line for line in result.stdout.splitlines() if line.startswith("  closest:")]
    assert closest and all("of 19.6 GiB" in line and "keeping the 60 GiB --memory-headroom free" in line
                           for line in closest)
