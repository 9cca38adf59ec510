"""Every `serve plan` answer runs unchanged through `serve simulate` and `serve export` (issue
#34): a deployment lies in one host or on whole hosts (meshplan.serving.engine.placement), the
simulator replays it with the same numbers, and the export starts each host's engines with
host-local CUDA_VISIBLE_DEVICES (multi-node flags for an engine wider than a host)."""

from __future__ import annotations

import itertools
import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.export.serving import export_serving
from meshplan.hardware import get_gpu
from meshplan.serving.engine.placement import check_placement, fits, place
from meshplan.serving.plan import Disaggregation, ServingPlan

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# --- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("plan, ok", [
    (ServingPlan(tp=2, replicas=4), True),    # 8: one host
    (ServingPlan(tp=2, replicas=5), False),   # 10: more than a host, not whole hosts (the issue's plan)
    (ServingPlan(tp=2, replicas=8), True),    # 16: two whole hosts
    (ServingPlan(tp=8, pp=2), True),          # one engine over two whole hosts
    (ServingPlan(tp=3, replicas=8), False),   # 24 GPUs, but a 3-GPU engine would straddle hosts
    (ServingPlan(disaggregated=Disaggregation(prefill_gpus=4, decode_gpus=12, prefill_tp=2, decode_tp=4)), True),
])
def test_a_deployment_fits_one_host_or_takes_whole_hosts(plan, ok):
    assert fits(plan, 8) is ok
    if not ok:
        with pytest.raises(ConfigError, match="nodes of 8"):
            check_placement(plan, 8)


def test_instances_pack_onto_hosts_without_straddling():
    plan = ServingPlan(disaggregated=Disaggregation(prefill_gpus=4, decode_gpus=12, prefill_tp=2, decode_tp=4))
    slots = place(plan, 8)
    used = sorted((s.node, g) for s in slots for g in s.gpus)
    assert used == [(n, g) for n in range(2) for g in range(8)]
    assert [s.role for s in slots] == ["prefill", "prefill", "decode", "decode", "decode"]


def test_simulate_refuses_a_deployment_off_whole_hosts():
    result = run("serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--tp", "3",
                 "--replicas", "8", "--num-requests", "5")
    assert result.exit_code == 2 and "straddle" in result.stderr, result.output


# --- the export -------------------------------------------------------------------------------

def host_blocks(text: str) -> dict[int, list[list[str]]]:
    """Shell words of each command by host rank (one host: rank 0)."""
    blocks: dict[int, list[list[str]]] = {}
    rank = 0
    for line in text.replace("\\\n", " ").splitlines():
        m = re.match(r'if \[ "\$NODE_RANK" = (\d+) \]; then', line)
        if m:
            rank = int(m.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            blocks.setdefault(rank, []).append(shlex.split(line.replace("&", "")))
    return blocks


def devices(words: list[str]) -> list[int]:
    env = [w for w in words if w.startswith("CUDA_VISIBLE_DEVICES=")]
    return [int(g) for g in env[0].split("=", 1)[1].split(",")] if env else []


def assert_placed_on_hosts(text: str, plan: ServingPlan, per_node: int, engine: str) -> None:
    blocks = host_blocks(text)
    program = {"vllm": "serve", "sglang": "sglang.launch_server"}[engine]
    total = 0
    for rank, cmds in blocks.items():
        gpus = [g for w in cmds if program in w or ("ray" in w and "--block" in w) for g in devices(w)]
        assert len(gpus) == len(set(gpus)) and all(0 <= g < per_node for g in gpus), (rank, gpus)
        total += len(gpus)
    if plan.num_gpus > per_node:
        assert sorted(blocks) == list(range(plan.num_gpus // per_node))  # one block per host
    if engine == "sglang" or plan.gpus_per_replica <= per_node:
        assert total == plan.num_gpus


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_two_host_deployment_exports_one_block_per_host(engine):
    plan = ServingPlan(engine=engine, tp=2, replicas=8)
    text = export_serving(engine, "org/model", plan, gpus_per_node=8)
    assert_placed_on_hosts(text, plan, 8, engine)
    assert "NODE_ADDRS" in text and "sit on one host" not in text


@pytest.mark.parametrize("engine, flags", [("vllm", ("--distributed-executor-backend",)),
                                           ("sglang", ("--nnodes", "--node-rank", "--dist-init-addr"))])
def test_an_engine_wider_than_a_host_gets_multi_node_flags(engine, flags):
    plan = ServingPlan(engine=engine, tp=8, pp=2)
    text = export_serving(engine, "org/model", plan, gpus_per_node=8)
    blocks = host_blocks(text)
    assert set(blocks) >= {0, 1}
    for flag in flags:
        assert flag in text
    if engine == "sglang":
        ranks = [w[w.index("--node-rank") + 1] for b in blocks.values() for w in b if "--node-rank" in w]
        assert sorted(ranks) == ["0", "1"]
    else:
        assert any("--block" in w for w in blocks[1]) and any("--head" in w for w in blocks[0])


# --- plan -> simulate -> export, over a grid -------------------------------------------------

GRID = list(itertools.product(
    ["h100-sxm-80gb", "gh200-96gb"],    # 8 and 4 GPUs per host
    [8.0, 40.0, 120.0],                  # req/s: one GPU, one host, several hosts
    [(1000, 40), (300, 25)],             # TTFT, TPOT objectives (ms)
    [6, 16],                             # --max-gpus
))


@pytest.mark.parametrize("gpu, rate, slo, max_gpus", GRID, ids=[f"{g[:4]}-{r:g}rps-{s[0]}-{s[1]}-max{m}"
                                                                 for g, r, s, m in GRID])
def test_every_plan_simulates_with_the_same_numbers_on_whole_hosts(tmp_path, gpu, rate, slo, max_gpus):
    out = run("serve", "plan", "--model", "llama-3.1-8b", "--gpu", gpu, "--request-rate", rate,
              "--slo-ttft-ms", slo[0], "--slo-tpot-ms", slo[1], "--max-gpus", max_gpus, "--num-requests", 100,
              "--workers", 1, "--top", 2, "--json")
    assert out.exit_code in (0, 1), out.output
    found = json.loads(out.stdout)
    per_node = get_gpu(gpu).default_gpus_per_node
    path = tmp_path / "plan.json"
    path.write_text(out.stdout)
    for i, p in enumerate(found["plans"], 1):
        plan = ServingPlan(**p["plan"])
        assert plan.num_gpus == p["gpus"] <= max_gpus
        assert fits(plan, per_node), p
        sim = run("serve", "simulate", "--plan", path, "--plan-index", i, "--json")
        assert sim.exit_code == 0, sim.output  # the SLOs the plan met are met again
        assert json.loads(sim.stdout)["metrics"] == p["metrics"]
        for engine in ("vllm", "sglang"):
            assert_placed_on_hosts(export_serving(engine, "org/model", plan, gpus_per_node=per_node),
                                   plan, per_node, engine)
    if not found["plans"]:
        beyond = found["smallest_beyond_max_gpus"]
        if beyond is not None:
            assert beyond["gpus"] > max_gpus
            assert beyond["gpus"] <= per_node or beyond["gpus"] % per_node == 0


def test_the_issue_plan_lies_on_whole_hosts_and_simulates(tmp_path):
    """llama-3.1-70b at 50 req/s: the search once answered tp2 x5 = 10 GPUs, which simulate refused."""
    out = run("serve", "plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--request-rate", 50,
              "--slo-ttft-ms", 500, "--slo-tpot-ms", 50, "--max-gpus", 32,
              "--no-disaggregation", "--top", 1, "--json")
    assert out.exit_code == 0, out.output
    path = tmp_path / "plan.json"
    path.write_text(out.stdout)
    best = json.loads(out.stdout)["plans"][0]
    assert best["gpus"] <= 8 or best["gpus"] % 8 == 0
    sim = run("serve", "simulate", "--plan", path, "--json")
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)["metrics"] == best["metrics"]
    script = run("serve", "export", "--target", "vllm", "--plan", path)
    assert script.exit_code == 0, script.output
    assert_placed_on_hosts(script.stdout, ServingPlan(**best["plan"]), 8, "vllm")


def test_no_plan_names_the_smallest_deployment_beyond_max_gpus():
    out = run("serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--request-rate", 120,
              "--slo-ttft-ms", 1000, "--slo-tpot-ms", 40, "--max-gpus", 4, "--num-requests", 100, "--workers", 1)
    assert out.exit_code == 1, out.output
    text = " ".join(out.stdout.split())
    m = re.search(r"Beyond --max-gpus 4, the smallest deployment that could serve it: .* = (\d+) GPUs", text)
    assert m and int(m.group(1)) > 4 and (int(m.group(1)) <= 8 or int(m.group(1)) % 8 == 0), text


def test_simulate_plan_flags_conflict_with_a_plan_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "tp": 2}))
    result = run("serve", "simulate", "--plan", path, "--tp", "4", "--num-requests", "5")
    assert result.exit_code == 2 and "drop --tp" in result.stderr, result.output
