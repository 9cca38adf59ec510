"""Two-batch overlap (SGLang --enable-two-batch-overlap, vLLM --enable-dbo) in the serving
iteration cost: off is today's serial cost, on overlaps one half's expert all-to-alls with the
other half's compute (meshplan.serving.cost.overlap)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.model.spec import MoEMLP
from meshplan.serving.cost.constants import constants_key, engine_constants
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.cost.memory import kv_layout
from meshplan.serving.engine.defaults import engine_defaults
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.validate.records import load_records
from meshplan.validate.serving_records import serving_case

HELD_OUT = Path(__file__).parents[1] / "src/meshplan/records/held-out/serving-engines-2025.yaml"
DSV3 = load_model("deepseek-v3")


def costs(model, gpus: int, gpus_per_node: int = 8, gpu: str = "h100-sxm-80gb", **plan):
    """(serial, overlapped) iteration costs of an attention-DP + EP SGLang replica on `gpus`."""
    cluster = Cluster.build(gpu, gpus, gpus_per_node=gpus_per_node)
    p = ServingPlan(engine="sglang", tp=1, dp=gpus, ep=gpus, **plan)
    k, kv = engine_constants(constants_key("sglang", None)), kv_layout(model, p)
    return (IterationCost(model, cluster, p, kv, k),
            IterationCost(model, cluster, p, kv, k, two_batch_overlap=True))


def decode_args(rows: int, context: int = 2000):
    return rows, rows, rows, rows * context, 0, 0.0, rows


def serial_comm(cost: IterationCost, tokens: int) -> float:
    """The stage's expert all-to-alls in the serial pass."""
    return sum(n * cost._ep_comm(layer, tokens) for layer, n in cost.layers.items())


def test_off_is_the_serial_sum_of_its_parts():
    off, _ = costs(DSV3, 16, weights_dtype="fp8")
    t, seqs, dec, ctx, pre, pairs, rows = decode_args(64)
    parts = (off.linear(t) + off.head(rows) + off.decode_attention(dec, ctx) + off.prefill_attention(pre, pairs)
             + off.num_layers * off.k.layer_s)
    assert off(t, seqs, dec, ctx, pre, pairs, rows) == parts + off.k.iteration_s + off.k.per_seq_s * seqs
    assert not off.tbo


@pytest.mark.parametrize("which", [0, 1])
def test_vectorised_and_single_iteration_costs_agree(which):
    cost = costs(DSV3, 16, weights_dtype="fp8")[which]
    calls = np.array([decode_args(1), decode_args(64), decode_args(256), (4096, 2, 0, 0, 4096, 2 * 2048 * 2049 / 2, 2)],
                     dtype=float)
    expected = [cost(*map(int, row[:3]), row[3], int(row[4]), row[5], int(row[6])) for row in calls]
    assert np.allclose(cost.batch(calls), expected, rtol=1e-12, atol=0)


def test_little_communication_to_hide_costs_a_little():
    # Mixtral on 2 NVLinked H100s, an 8k-token prefill: the all-to-alls are ~3% of the compute,
    # and 4k-row expert GEMMs run a little slower than 8k-row ones in the shared GEMM model.
    off, on = costs(load_model("mixtral-8x7b"), 2)
    args = (8192, 4, 0, 0.0, 8192, 4 * 2048 * 2049 / 2, 4)
    comm = serial_comm(off, 8192)
    assert comm < 0.05 * off.linear(8192)
    assert off(*args) < on(*args) < 1.25 * off(*args)


def test_comparable_communication_is_mostly_hidden():
    # DeepSeek-V3 decode over 9 nodes (EP72, 256 requests per rank, the LMSYS H100 layout):
    # the all-to-alls take about as long as the compute.
    off, on = costs(DSV3, 72, weights_dtype="fp8")
    args = decode_args(256)
    comm = serial_comm(off, 256)
    serial = off(*args)
    compute = serial - comm
    assert 0.5 < comm / compute < 2
    longer = max(compute, comm)
    assert longer < on(*args) < serial
    assert on(*args) - longer < 0.5 * (serial - longer)  # more than half of the shorter stream hidden


def test_halves_pay_their_own_weights_and_comm():
    _, on = costs(DSV3, 72, weights_dtype="fp8")
    whole, compute, comm, exposed = on.overlapped(256)
    moe = next(layer for layer in on.layers if isinstance(layer.mlp, MoEMLP))
    half = on._layer(moe, 128) - on._ep_comm(moe, 128)
    assert compute == pytest.approx(on.moe_layers * (2 * half + on.k.layer_s))
    assert comm == pytest.approx(2 * on.moe_layers * on._ep_comm(moe, 128))
    assert 0 < exposed < comm / on.moe_layers
    assert whole == pytest.approx(sum(n * on._layer(layer, 256) for layer, n in on.layers.items()
                                      if not isinstance(layer.mlp, MoEMLP)))


def test_dense_models_and_single_token_batches_stay_serial():
    off, on = costs(DSV3, 16, weights_dtype="fp8")
    assert on(*decode_args(1)) == off(*decode_args(1))
    dense = load_model("llama-3.1-8b")
    cluster = Cluster.build("h100-sxm-80gb", 2, gpus_per_node=8)
    p = ServingPlan(engine="sglang", dp=2, ep=2)
    cost = IterationCost(dense, cluster, p, kv_layout(dense, p), engine_constants(constants_key("sglang", None)),
                         two_batch_overlap=True)
    assert not cost.tbo


@pytest.mark.parametrize("engine, version", [("sglang", "0.4.6"), ("sglang", "0.5.3"), ("sglang", None),
                                             ("vllm", "0.11.0"), ("tensorrt-llm", "1.0")])
def test_engine_default_is_off(engine, version):
    assert engine_defaults(engine, 80 * 2**30, version=version).two_batch_overlap is False


def test_plan_refuses_overlap_without_expert_parallelism_or_on_tensorrt_llm():
    with pytest.raises(ValidationError, match="needs ep > 1"):
        ServingPlan(engine="sglang", enable_two_batch_overlap=True)
    with pytest.raises(ValidationError, match="TensorRT-LLM has no two-micro-batch overlap"):
        ServingPlan(engine="tensorrt-llm", ep=8, dp=8, enable_two_batch_overlap=True)
    assert ServingPlan(engine="tensorrt-llm", ep=8, dp=8, enable_two_batch_overlap=True, what_if=True)


def test_records_state_it_and_the_replica_cost_reads_it():
    records = {r.id: r for r in load_records(HELD_OUT)}
    for rid, stated in (("lmsys-sglang-h100-dsv3-decode-ep72-2k", True),
                        ("lmsys-sglang-gb200-dsr1-decode-fp4-ep48-2k", False),
                        ("lmsys-sglang-h200-kimi-k2-decode-12node-2k", None)):
        case = serving_case(records[rid])
        assert case.plan.enable_two_batch_overlap is stated
        pool = resolve_pools(case.model, case.cluster, case.plan, case.workload)[0]
        cost = build_replicas(case.model, case.cluster, pool, case.workload, IterationLog(), 0)[0].cost
        assert cost.tbo is bool(stated)


def test_simulation_changes_only_when_stated():
    model = load_model("qwen3-30b-a3b")
    cluster = Cluster.build("h100-sxm-80gb", 8, gpus_per_node=4)
    wl = synthesize(WorkloadSpec(dataset="fixed", input_len=2000, output_len=50, num_requests=64,
                                 arrival="concurrency", concurrency=64), seed=0)
    runs = {tbo: simulate(model, cluster, ServingPlan(engine="sglang", dp=8, ep=8, enable_two_batch_overlap=tbo),
                          wl).metrics.output_tokens_per_s for tbo in (None, False, True)}
    assert runs[None] == runs[False] != runs[True]


def test_cli_flag_and_exporters():
    from meshplan.export.serving import export_serving

    runner = CliRunner()
    args = ["serve", "simulate", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm-80gb", "--engine", "sglang",
            "--dp", "2", "--ep", "2", "--dataset", "fixed", "--input-len", "500", "--output-len", "10",
            "--num-requests", "16", "--json"]
    on, off = (runner.invoke(app, [*args, flag]) for flag in ("--enable-two-batch-overlap", "--no-two-batch-overlap"))
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    assert json.loads(on.stdout)["metrics"] != json.loads(off.stdout)["metrics"]
    bad = runner.invoke(app, ["serve", "simulate", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm-80gb",
                              "--engine", "sglang", "--enable-two-batch-overlap"])
    assert bad.exit_code == 2 and "needs ep > 1" in bad.output
    plan = dict(dp=2, ep=2, enable_two_batch_overlap=True)
    assert "--enable-two-batch-overlap" in export_serving("sglang", "Qwen/Qwen3-30B-A3B", ServingPlan(engine="sglang", **plan))
    assert "--enable-dbo" in export_serving("vllm", "Qwen/Qwen3-30B-A3B", ServingPlan(**plan))


def test_vllm_splits_only_above_its_token_thresholds():
    # vLLM's dual batch overlap micro-batches decode-only steps above 32 tokens and steps with a
    # prefill above 512 (ParallelConfig.dbo_*_token_threshold); SGLang splits any two requests.
    assert engine_defaults("vllm", 80 * 2**30).two_batch_above_tokens == (32, 512)
    assert engine_defaults("sglang", 80 * 2**30).two_batch_above_tokens == (1, 1)
    off, on = costs(DSV3, 72, weights_dtype="fp8")
    vllm = IterationCost(on.model, on.cluster, on.plan, on.kv, on.k, two_batch_overlap=True, two_batch_above=(32, 512))
    assert vllm(*decode_args(32)) == off(*decode_args(32)) != on(*decode_args(32))
    assert vllm(*decode_args(33)) == on(*decode_args(33))
    prefill = (512, 1, 0, 0.0, 512, 512 * 513 / 2, 1)
    assert vllm(*prefill) == off(*prefill) != on(*prefill)
    calls = np.array([decode_args(32), decode_args(33), prefill, (513, 1, 0, 0.0, 513, 513 * 514 / 2, 1)], dtype=float)
    expected = [vllm(*map(int, row[:3]), row[3], int(row[4]), row[5], int(row[6])) for row in calls]
    assert np.allclose(vllm.batch(calls), expected, rtol=1e-12, atol=0)
