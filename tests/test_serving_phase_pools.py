"""Phase pools: one pool of a disaggregated deployment simulated and validated alone
(`disaggregated.decode_gpus: null` or `prefill_gpus: null`, `serve simulate --pool`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.validate.records import load_records, parse_record
from meshplan.validate.run import serving_rows

RECORDS = Path(__file__).parent / "data" / "phase_pools" / "records.yaml"
MODEL = load_model("llama-3.1-8b")
CLUSTER = Cluster.build(gpu="h100-sxm-80gb", num_gpus=8, gpus_per_node=8)
PREFILL = ServingPlan(disaggregated=Disaggregation(prefill_gpus=1))
DECODE = ServingPlan(disaggregated=Disaggregation(decode_gpus=1))
runner = CliRunner()


def workload(**spec):
    return synthesize(WorkloadSpec(dataset="fixed", **spec), seed=0)


def cost_of(plan, wl):
    pool = resolve_pools(MODEL, CLUSTER, plan, wl)[0]
    return pool, build_replicas(MODEL, CLUSTER, pool, wl, IterationLog(), 0)[0].cost


def test_one_side_null_deploys_only_the_other_pool():
    assert PREFILL.disaggregated.phase == "prefill" and DECODE.disaggregated.phase == "decode"
    assert PREFILL.num_gpus == 1 and ServingPlan(disaggregated=Disaggregation(prefill_gpus=2, decode_gpus=4)).num_gpus == 6
    assert [p.role for p in resolve_pools(MODEL, CLUSTER, DECODE, workload(arrival="offline", num_requests=4,
                                                                            input_len=64, output_len=8))] == ["decode"]
    with pytest.raises(ValueError, match="prefill_gpus or decode_gpus"):
        Disaggregation()


def test_prefill_pool_ttft_is_the_cost_model_prefill_time():
    """One prompt at a time (concurrency 1): each request's TTFT is one prefill iteration of its
    whole prompt, priced by hand with the cost model: L tokens, L(L+1)/2 causal pairs, 1 sampled row."""
    L = 3000
    wl = workload(arrival="concurrency", concurrency=1, num_requests=5, input_len=L, output_len=50)
    _, cost = cost_of(PREFILL, wl)
    expected = cost(L, 1, 0, 0.0, L, L * (L + 1) / 2, 1)
    m = simulate(MODEL, CLUSTER, PREFILL, wl).metrics
    assert m.ttft_ms.mean == pytest.approx(expected * 1e3, rel=1e-9)
    assert m.total_output_tokens == 5  # the pool's requests end with the token prefill samples
    assert m.input_tokens_per_s == pytest.approx(L / expected, rel=1e-9)


def test_decode_pool_runs_only_decode_steps_at_the_stated_concurrency():
    """C requests with L-token contexts arrive with their KV present and only decode. The first
    client's arrival starts a step alone (the others arrive at that same instant, as in the
    colocated closed loop); the rest join at step 1. Step j reads each member's L + (steps it has
    run) cached tokens; priced by hand with the cost model."""
    C, L, O = 16, 1024, 32
    wl = workload(arrival="concurrency", concurrency=C, num_requests=C, input_len=L, output_len=O)
    _, cost = cost_of(DECODE, wl)
    step = lambda n, ctx: cost(n, n, n, float(ctx), 0, 0.0, n)  # noqa: E731
    t = [step(1, L)] + [step(C, (L + j) + (C - 1) * (L + j - 1)) for j in range(1, O)]
    t.append(step(C - 1, (C - 1) * (L + O - 1)))
    result = simulate(MODEL, CLUSTER, DECODE, wl)
    assert result.log.column("prefill_tokens").sum() == 0 and len(result.log) == O + 1
    m = result.metrics
    assert m.ttft_ms.mean == pytest.approx((t[0] + (C - 1) * (t[0] + t[1])) / C * 1e3, rel=1e-9)
    tpot = (sum(t[1:O]) + (C - 1) * sum(t[2:O + 1])) / (O - 1) / C
    assert m.tpot_ms.mean == pytest.approx(tpot * 1e3, rel=1e-9)
    assert m.output_tokens_per_s == pytest.approx(C * O / sum(t), rel=1e-9)


@pytest.mark.parametrize("knob", ["concurrency", "input_len"])
def test_decode_pool_per_token_latency_grows_with_concurrency_and_context(knob):
    base = {"concurrency": 8, "input_len": 1024}
    tpots = []
    for scale in (1, 4):
        spec = {**base, knob: base[knob] * scale}
        wl = workload(arrival="concurrency", num_requests=spec["concurrency"] * 2, output_len=64, **spec)
        tpots.append(simulate(MODEL, CLUSTER, DECODE, wl).metrics.tpot_ms.mean)
    assert tpots[1] > tpots[0]


def test_each_pool_alone_bounds_the_whole_deployment():
    """The full P/D deployment cannot finish requests faster than either of its pools alone."""
    both = ServingPlan(disaggregated=Disaggregation(prefill_gpus=1, decode_gpus=1))
    wl = workload(arrival="offline", num_requests=300, input_len=2000, output_len=200)
    whole = simulate(MODEL, CLUSTER, both, wl).metrics.requests_per_s
    for alone in (PREFILL, DECODE):
        assert simulate(MODEL, CLUSTER, alone, wl).metrics.requests_per_s >= whole * 0.99


RECORD = {
    "id": "decode-pool", "kind": "serving", "source": {"name": "test"}, "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 1, "gpus_per_node": 8},
    "serving": {"engine": "vllm", "disaggregated": {"prefill_gpus": None, "decode_gpus": 1, "decode_tp": 1},
                "workload": {"mode": "concurrency", "concurrency": 16, "input_len": 1024, "output_len": 32,
                             "num_requests": 16}},
    "measured": {"output_tokens_per_s": 1000.0, "tpot_ms_mean": 15.0},
}


def test_decode_pool_record_is_predicted_as_the_decode_pool_alone():
    rows = {r.metric: r for r in serving_rows(parse_record(RECORD, "test"))}
    C, L, O = 16, 1024, 32
    wl = workload(arrival="concurrency", concurrency=C, num_requests=C, input_len=L, output_len=O)
    m = simulate(MODEL, CLUSTER, DECODE, wl).metrics
    assert rows["output_tokens_per_s"].predicted == pytest.approx(m.output_tokens_per_s, rel=1e-12)
    assert rows["tpot_ms_mean"].predicted == pytest.approx(m.tpot_ms.mean, rel=1e-12)


@pytest.mark.parametrize("change, message", [
    ({"measured": {"ttft_ms_mean": 10.0}}, "decode-pool record .* cannot state ttft_ms_mean"),
    ({"serving": {**RECORD["serving"], "disaggregated": {"prefill_gpus": None, "decode_gpus": None}}},
     "both null"),
    ({"serving": {**RECORD["serving"], "disaggregated": {"prefill_gpus": None, "decode_gpus": 1}}},
     "decode_tp is required"),
])
def test_bad_phase_records_name_the_rule(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_record({**RECORD, **change}, "test")


def test_published_prefill_pool_record_is_scored():
    """SGLang's large-scale EP prefill pool (DeepSeek-V3, 4 x 8 H100, 52.3k input tokens/s per
    node; lmsys.org/blog/2025-05-05-large-scale-ep): validate predicts it. The prediction is about
    half the measured rate: meshplan prices the EP all-to-all in bf16 and not overlapped with
    compute, where SGLang dispatches fp8 with DeepEP and overlaps two micro-batches; this test pins
    that the record is scored and the known gap does not widen past 60%."""
    (record,) = load_records(RECORDS)
    (row,) = serving_rows(record)
    assert row.metric == "input_tokens_per_s"
    assert -0.6 < row.rel_error < 0.2


def test_cli_pool_flag():
    args = ("serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--dataset", "fixed",
            "--input-len", "1000", "--output-len", "20", "--num-requests", "20")
    out = runner.invoke(app, [*args, "--pool", "prefill", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [p["role"] for p in data["deployment"]] == ["prefill"]
    assert data["metrics"]["total_output_tokens"] == 20
    assert data["metrics"]["input_tokens_per_s"] > 0
    text = runner.invoke(app, [*args, "--pool", "decode", "--concurrency", "4"])
    assert text.exit_code == 0 and "decode pool alone:" in text.output


@pytest.mark.parametrize("extra, message", [
    (("--pool", "middle"), "--pool 'middle': choose one of both, prefill, decode"),
    (("--pool", "decode", "--prefill-gpus", "2"), "drop --prefill-gpus"),
    (("--prefill-gpus", "2"), "needs both --prefill-gpus and --decode-gpus"),
])
def test_cli_bad_pool_is_one_message_exit_2(extra, message):
    out = runner.invoke(app, ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", *extra])
    assert out.exit_code == 2
    assert message in out.output


@pytest.mark.parametrize("target", ["vllm", "sglang"])
def test_phase_pool_plan_is_not_exported(target):
    from meshplan.export.serving import export_serving

    with pytest.raises(ConfigError, match="only a decode pool"):
        export_serving(target, "meta-llama/Llama-3.1-8B", DECODE)
