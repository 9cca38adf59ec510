"""MoE routing imbalance (training/imbalance/routing.py): the busiest expert and EP rank against a
brute-force histogram of routed tokens, EPLB's greedy replication against an exhaustive search,
balancing, and the step time of a skewed MoE model."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli import app
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.imbalance.routing import (
    AUX_FREE_RESIDUAL, aux_free, eplb_rank_loads, expert_shares, routing_load,
)


@pytest.mark.parametrize("experts, ep, s", [(64, 8, 1.2), (8, 4, 0.7), (128, 16, 1.5)])
def test_busiest_rank_matches_a_histogram_of_routed_tokens(experts, ep, s):
    """Route a million token copies by the expert shares and count what each contiguous block of
    experts (one EP rank) receives."""
    spec = f"zipf:s={s},seed=7"
    shares = expert_shares(spec, experts)
    rng = np.random.default_rng(1)
    routed = rng.choice(experts, size=1_000_000, p=shares)
    per_expert = np.bincount(routed, minlength=experts)
    per_rank = np.array([per_expert[r * experts // ep:(r + 1) * experts // ep].sum() for r in range(ep)])
    load = routing_load(spec, experts, ep, "none")
    assert load.busiest_rank == pytest.approx(per_rank.max() / per_rank.mean(), rel=0.01)
    assert load.busiest_expert == pytest.approx(per_expert.max() / per_expert.mean(), rel=0.01)


def test_more_skew_loads_the_busiest_rank_more():
    loads = [routing_load(f"zipf:s={s}", 64, 8, "none").busiest_rank for s in (0, 0.5, 1.0, 1.5, 2.0)]
    assert loads[0] == pytest.approx(1.0) and loads == sorted(loads) and loads[-1] > 2


@pytest.mark.parametrize("experts, ep, slots", [(4, 2, 2), (6, 3, 3), (8, 4, 4)])
def test_eplb_replication_is_the_best_split_of_the_hottest_experts(experts, ep, slots):
    """Greedy replication (next replica to the most loaded per replica) minimises the busiest
    replica: compare with every way to give `slots` replicas to the experts."""
    shares = expert_shares("zipf:s=1.3,seed=2", experts)
    loads, hottest = eplb_rank_loads(shares, ep, slots)
    best = min(max(shares / (1 + np.bincount(extra, minlength=experts)))
               for extra in itertools.combinations_with_replacement(range(experts), slots))
    assert hottest == pytest.approx(best, rel=1e-12)
    assert loads.sum() == pytest.approx(1.0) and len(loads) == ep


def test_each_balancer_lowers_the_busiest_rank():
    for s in (0.8, 1.2, 2.0):
        spec = f"zipf:s={s}"
        none, free, eplb = (routing_load(spec, 64, 8, b) for b in ("none", "aux-free", "eplb"))
        assert free.busiest_rank < none.busiest_rank and eplb.busiest_rank < none.busiest_rank
        assert free.busiest_expert == pytest.approx(1 + AUX_FREE_RESIDUAL)
    assert aux_free(np.full(8, 1 / 8)).tolist() == [1 / 8] * 8  # already even: untouched


MODEL, CLUSTER = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 64)


def _step(**fields) -> float:
    plan = TrainingPlan(tp=2, pp=4, ep=8, seq_len=4096, global_batch_size=256, micro_batch_size=1,
                        **fields)
    return estimate_step(MODEL, CLUSTER, resolve_plan(plan, MODEL, CLUSTER)).step_time_s


def test_step_time_grows_with_skew_and_balancing_recovers_it():
    steps = [_step(expert_skew=f"zipf:s={s}") for s in (0.3, 0.8, 1.3)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    uniform = _step(expert_skew="uniform")
    assert uniform < steps[0]
    for balance in ("aux-free", "eplb"):
        assert uniform <= _step(expert_skew="zipf:s=1.3", moe_balance=balance) < steps[-1]
    assert _step(moe_balance="eplb") == _step()  # without a skew: the fitted imbalance, unchanged


def test_a_capacity_factor_caps_the_skew():
    assert _step(expert_skew="zipf:s=1.3", capacity_factor=1.0) == _step(expert_skew="uniform")


runner = CliRunner()
BASE = ["train", "estimate", "--model", "mixtral-8x7b", "--gpu", "h100-sxm-80gb", "--num-gpus",
        "64", "--tp", "2", "--pp", "4", "--ep", "8"]


def test_measured_profile_file(tmp_path):
    f = tmp_path / "shares.json"
    f.write_text(json.dumps([4, 1, 1, 1, 1, 1, 1, 2]))
    result = runner.invoke(app, [*BASE, "--expert-skew", str(f), "--json"])
    assert result.exit_code == 0, result.output
    moe = json.loads(result.output)["imbalance"]["moe"]
    assert moe["busiest_expert_load"] == pytest.approx(4 / 12 * 8)
    assert moe["busiest_ep_rank_load"] == pytest.approx(4 / 12 * 8)


def test_profile_csv_with_a_header(tmp_path):
    from meshplan.training.imbalance.routing import read_profile

    f = tmp_path / "shares.csv"
    f.write_text("expert,share\n0,0.5\n1,0.25\n2,0.25\n")
    assert read_profile(str(f)) == (0.5, 0.25, 0.25)


@pytest.mark.parametrize("content, needle", [
    ("[1, 2, 3]", "3 shares, but the model has 8 routed experts"),
    ("[1, 2, -3, 1, 1, 1, 1, 1]", "line 3 has -3"),
    ("[0, 0, 0, 0, 0, 0, 0, 0]", "no positive expert shares"),
    ("[1, 2", "not valid JSON"),
    ('[1, 2, "x", 1, 1, 1, 1, 1]', "line 3 has 'x'"),
])
def test_bad_profiles_are_config_errors(tmp_path, content, needle):
    f = tmp_path / "shares.json"
    f.write_text(content)
    result = runner.invoke(app, [*BASE, "--expert-skew", str(f)])
    assert result.exit_code == 2 and needle in result.output


@pytest.mark.parametrize("spec", ["zipf:x=1", "zipf:s=-1", "pareto:s=1"])
def test_bad_skew_specs_are_config_errors(spec):
    result = runner.invoke(app, [*BASE, "--expert-skew", spec])
    assert result.exit_code == 2 and "--expert-skew" in result.output


def test_dense_model_ignores_the_skew_with_a_warning():
    model, cluster = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(expert_skew="zipf:s=1"), model, cluster)
    assert plan.expert_skew is None and any("expert_skew is ignored" in w for w in plan.warnings)
