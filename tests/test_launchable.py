"""Every plan the search ranks can be launched: for each framework with an exporter and a grid of
models and cluster sizes, each of the top 10 plans exports without error (the search and the
exporters share one capability table, meshplan.training.layout.capabilities)."""

from __future__ import annotations

import pytest

from meshplan import Cluster, TrainingPlan, load_model
from meshplan.export import export_plan
from meshplan.training.layout.capabilities import CAPABILITIES, problems
from meshplan.training.search.plans import search

MODELS = ("llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v2-lite",
          "qwen3-30b-a3b")
SIZES = (8, 64)


@pytest.mark.parametrize("framework", sorted(f for f, c in CAPABILITIES.items() if c.exporter))
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("gpus", SIZES)
def test_top_ten_plans_export(framework, model_name, gpus):
    model = load_model(model_name)
    cluster = Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(seq_len=4096, global_batch_size=gpus * 4, framework=framework)
    result = search(model, cluster, base, {}, top=10)
    target = CAPABILITIES[framework].exporter
    for est in result.ranked:
        assert problems(framework, est.plan) == []
        assert export_plan(target, model, cluster, est.plan), est.plan


def test_torchtitan_search_never_ranks_a_schedule_it_cannot_run():
    model = load_model("llama-3.1-70b")
    cluster = Cluster.build("h100-sxm-80gb", 64)
    base = TrainingPlan(seq_len=8192, global_batch_size=64, framework="torchtitan")
    result = search(model, cluster, base, {}, top=20)
    assert result.ranked
    for est in result.ranked:
        assert (est.plan.schedule, est.plan.vpp > 1) in {("1f1b", False), ("gpipe", False),
                                                         ("interleaved", True)} or est.plan.pp == 1


def test_pinned_schedule_is_respected_and_validated():
    from typer.testing import CliRunner

    from meshplan.cli.app import app

    runner = CliRunner()
    args = ["train", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64",
            "--global-batch-size", "64", "--pp", "4", "--json"]
    ok = runner.invoke(app, [*args, "--schedule", "interleaved"])
    assert ok.exit_code == 0, ok.output
    import json

    plans = json.loads(ok.stdout)["plans"]
    assert plans and all(p["schedule"] == "interleaved" and p["vpp"] > 1 for p in plans)
    bad = runner.invoke(app, [*args, "--schedule", "zero-bubble"])
    assert bad.exit_code == 2 and "megatron runs 1f1b, interleaved" in bad.output
