"""A deployment that states only its GPU count gets a layout instead of tp=1 and "does not fit"
(issue #32 item 5): the smallest TP whose replica holds the model and the longest request,
replicas filling the GPUs; the choice is said (a note, a JSON field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.engine.layout import candidates, choose_layout
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.validate.records import read_records
from meshplan.validate.run import record_rows
from meshplan.validate.serving_records import layout_unstated, serving_case

RECORDS = Path(__file__).resolve().parents[1] / "src/meshplan/records/serving-calibration.yaml"
WORK = WorkloadSpec(num_requests=40, input_len=1000, output_len=200)


def test_candidates_powers_of_two_in_a_node_then_pipeline_over_nodes():
    assert candidates(8, 8) == [(1, 1), (2, 1), (4, 1), (8, 1)]
    assert candidates(6, 8) == [(1, 1), (2, 1)]
    assert candidates(32, 8) == [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4)]


@pytest.mark.parametrize(("model", "tp", "replicas"), [("llama-3.1-8b", 1, 8), ("llama-3.1-70b", 2, 4)])
def test_smallest_tp_that_fits_fills_the_gpus(model, tp, replicas):
    spec, cluster = load_model(model), Cluster.build("h100-sxm-80gb", 8)
    plan, note = choose_layout(spec, cluster, ServingPlan(), synthesize(WORK, seed=0))
    assert (plan.tp, plan.pp, plan.replicas) == (tp, 1, replicas)
    assert f"tp={tp} pp=1 x {replicas} replicas" in note
    simulate(spec, cluster, plan, synthesize(WORK, seed=0))  # and it runs


def test_the_longest_request_must_fit_the_kv_cache():
    spec, cluster = load_model("llama-3.1-70b"), Cluster.build("h100-sxm-80gb", 8)
    long = synthesize(WorkloadSpec(num_requests=4, input_len=100_000, output_len=1000), seed=0)
    plan, _ = choose_layout(spec, cluster, ServingPlan(), long)
    assert plan.tp >= 4  # tp=2 holds 70B's weights but ~20k tokens of KV


def test_nothing_fits_keeps_the_largest_layout_and_says_so():
    spec, cluster = load_model("llama-3.1-405b"), Cluster.build("l40s-48gb", 2)
    plan, note = choose_layout(spec, cluster, ServingPlan(), synthesize(WORK, seed=0))
    assert plan.tp == 2 and "no layout fits" in note


def _record_without_layout():
    records, _ = read_records(RECORDS)
    record = next(r for r in records if r.id == "trtllm-0.13-h200-fp8-llama-3-70b-tp4-128-128")
    serving = record.serving.model_copy(update={"tp": None, "pp": None})
    return record.model_copy(update={"serving": serving})


def test_a_record_with_only_a_gpu_count_gets_a_layout():
    record = _record_without_layout()
    assert layout_unstated(record)
    case = serving_case(record)
    assert case.plan.tp * case.plan.pp * case.plan.replicas == record.hardware.num_gpus == 4
    assert any("no layout given for 4 GPUs" in n for n in case.notes)
    rows = record_rows(record)
    assert not hasattr(rows, "reason") and rows[0].notes == case.notes


def test_a_stated_layout_is_kept():
    records, _ = read_records(RECORDS)
    record = next(r for r in records if r.id == "trtllm-0.13-h200-fp8-llama-3-70b-tp4-128-128")
    case = serving_case(record)
    assert not layout_unstated(record) and case.plan.tp == 4 and case.notes == ()


ARGS = ["serve", "simulate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
        "--num-requests", "30", "--input-len", "500", "--output-len", "100", "--json"]


def test_cli_chooses_a_layout_and_says_which():
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    assert "note: no layout given for 8 GPUs: chose tp=2 pp=1 x 4 replicas" in result.stderr
    data = json.loads(result.stdout)
    assert data["layout"]["tp"] == 2 and data["layout"]["chosen"] and data["deployment"][0]["replicas"] == 4


def test_cli_explicit_tp_is_not_overridden():
    result = CliRunner().invoke(app, [*ARGS, "--tp", "1"])
    assert result.exit_code != 0 and "does not fit" in result.output and "no layout given" not in result.output


def test_cli_notes_a_version_without_a_number():
    result = CliRunner().invoke(app, [*ARGS, "--tp", "4", "--replicas", "2", "--engine", "tensorrt-llm",
                                      "--engine-version", "latest"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("note: engine version 'latest' names no release") == 1
    assert "layout" not in json.loads(result.stdout)


def test_choose_layout_never_raises_for_want_of_a_layout():
    spec, cluster = load_model("llama-3.1-70b"), Cluster.build("h100-sxm-80gb", 3)
    try:
        plan, _ = choose_layout(spec, cluster, ServingPlan(), synthesize(WORK, seed=0))
    except ConfigError as exc:  # pragma: no cover - the point of the test
        pytest.fail(f"choose_layout raised {exc}")
    assert plan.tp == 1 and plan.replicas == 3  # 3 GPUs: no power-of-two TP above 1 divides them


def test_cli_phase_pools_keep_their_own_tp():
    result = CliRunner().invoke(app, ["serve", "simulate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb",
                                      "--num-gpus", "4", "--pool", "prefill", "--prefill-tp", "4", "--offline",
                                      "--dataset", "fixed", "--input-len", "500", "--output-len", "1",
                                      "--num-requests", "20", "--json"])
    assert result.exit_code == 0, result.output
    assert "no layout given" not in result.stderr and "layout" not in json.loads(result.stdout)
