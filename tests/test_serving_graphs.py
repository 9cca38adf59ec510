"""CUDA graphs in serving (serving/cost/graphs.py): which iterations replay a graph per engine, the
host floor of eager ones, and --enforce-eager from the CLI to the launch commands."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan import load_model
from meshplan.cli.app import app
from meshplan.export.serving import sglang, vllm
from meshplan.serving.cost.graphs import GraphPolicy, graph_policy, layer_kernels
from meshplan.serving.plan import ServingPlan

runner = CliRunner()


def test_vllm_graphs_cover_small_batches_of_any_kind_sglang_and_trtllm_decode_only():
    vllm_policy = GraphPolicy("tokens", 512, 1e-3)
    assert vllm_policy.graphed(tokens=300, seqs=3, prefill_tokens=298)  # piecewise: mixed too
    assert not vllm_policy.graphed(tokens=513, seqs=1, prefill_tokens=513)
    decode = GraphPolicy("decode", 160, 1e-3)
    assert decode.graphed(tokens=160, seqs=160, prefill_tokens=0)
    assert not decode.graphed(tokens=161, seqs=161, prefill_tokens=0)
    assert not decode.graphed(tokens=10, seqs=2, prefill_tokens=9)  # any prefill runs eagerly
    assert not GraphPolicy(None, 0, 1e-3).graphed(tokens=1, seqs=1, prefill_tokens=0)


def test_layer_kernels_follow_the_module_structure():
    llama = load_model("llama-3.1-8b").layers[0]
    assert layer_kernels(llama, tp=1, ep=1) == 2 + 1 + 4 + 3  # norms, qkv, rope/cache/attn/o, MLP
    assert layer_kernels(llama, tp=8, ep=1) == 12  # + two all-reduces
    dsv3 = next(layer for layer in load_model("deepseek-v3").layers if layer.mlp.__class__.__name__ == "MoEMLP")
    assert layer_kernels(dsv3, tp=8, ep=8) == 2 + 3 + 4 + 2 + 7 + 2 + 3


def test_sglang_prefill_graphs_by_release_and_deployment():
    """SGLang 0.5.9 runs every prefill eagerly; 0.5.10 replays piecewise prefill graphs up to the
    chunked-prefill size (2048 tokens for MLA models) except under pipeline parallelism, DeepEP or
    disaggregation; 0.5.15+ replays breakable ones (MLA cap 8192); AMD GPUs keep prefill eager
    (engine_defaults.yaml, prefill_cuda_graph_max_tokens, read from the PyPI wheels)."""
    from meshplan.serving.engine.defaults import engine_defaults
    h100 = 80 * 2**30
    old = engine_defaults("sglang", h100, tp=8, gpu_name="h100-sxm-80gb", version="0.5.9")
    pcg = engine_defaults("sglang", h100, tp=8, gpu_name="h100-sxm-80gb", version="0.5.10")
    bcg = engine_defaults("sglang", h100, tp=8, gpu_name="h100-sxm-80gb")
    amd = engine_defaults("sglang", 192 * 2**30, tp=8, gpu_name="mi300x")
    assert old.prefill_graph_max_tokens == 0 and amd.prefill_graph_max_tokens == 0
    assert pcg.prefill_graph_max_tokens == pcg.max_num_batched_tokens == 8192
    assert (pcg.prefill_graph_mla_cap, bcg.prefill_graph_mla_cap) == (2048, 8192)
    assert "deepep" in pcg.prefill_graph_off_with and "deepep" not in bcg.prefill_graph_off_with
    policy = GraphPolicy("decode", 160, 0.08, prefill_max_tokens=2048)
    assert policy.graphed(tokens=2048, seqs=2, prefill_tokens=2048)
    assert not policy.graphed(tokens=2049, seqs=1, prefill_tokens=2049)
    assert not GraphPolicy("decode", 160, 0.08).graphed(tokens=5, seqs=1, prefill_tokens=5)


def test_sglang_eager_launch_time_is_the_measured_forward_over_the_counted_kernels():
    """data/eager_host.yaml: sglang PR #12160 logs an 82.6 ms eager forward of one new token on
    DeepSeek-V3 at TP8; divided by the kernels layer_kernels counts for it, that is the per-kernel
    host time (1% for the rounding of the stored figure)."""
    from collections import Counter

    from meshplan.serving.cost.graphs import launch_s
    model = load_model("deepseek-v3")
    kernels = sum(n * layer_kernels(layer, tp=8, ep=1) for layer, n in Counter(model.layers).items()) + 3
    assert launch_s("sglang") == pytest.approx(82.6e-3 / kernels, rel=0.01)
    assert launch_s("vllm") < launch_s("sglang") / 4  # vLLM: the generic Python figure
    policy = graph_policy("sglang", 160, Counter(model.layers), 8, 1, enforce_eager=False)
    assert policy.host_floor_s == pytest.approx(82.6e-3, rel=0.01)


def test_enforce_eager_and_the_c_runtime():
    model = load_model("llama-3.2-1b")
    layers = {model.layers[0]: model.num_layers}
    assert graph_policy("vllm", 512, layers, 1, 1, enforce_eager=True).max_batch == 0
    python = graph_policy("vllm", 512, layers, 1, 1, enforce_eager=False)
    cpp = graph_policy("tensorrt-llm", 512, layers, 1, 1, enforce_eager=False)
    assert python.scope == "tokens" and cpp.scope is None
    assert cpp.host_floor_s < python.host_floor_s / 5  # C++ enqueue: never the bound


def simulate(*extra: str) -> dict:
    result = runner.invoke(app, ["serve", "simulate", "--model", "gpt2", "--gpu", "h100-sxm-80gb",
                                 "--concurrency", "1", "--num-requests", "8", "--input-len", "200",
                                 "--output-len", "64", "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["metrics"]


@pytest.mark.parametrize("engine", [("vllm",), ("sglang",), ("sglang", "--engine-version", "0.5.9")])
def test_a_small_model_at_batch_one_waits_on_the_host_without_graphs(engine):
    graphed = simulate("--engine", *engine)
    eager = simulate("--engine", *engine, "--enforce-eager")
    assert eager["tpot_ms"]["mean"] > 1.3 * graphed["tpot_ms"]["mean"]
    if engine[-1] == "0.5.9":  # SGLang before 0.5.10 runs every prefill eagerly, graphs or not
        assert eager["ttft_ms"]["mean"] == pytest.approx(graphed["ttft_ms"]["mean"], rel=1e-6)
    else:  # vLLM's piecewise graphs and SGLang's prefill graphs (0.5.10+) cover a 200-token prompt
        assert eager["ttft_ms"]["mean"] > 1.3 * graphed["ttft_ms"]["mean"]


def test_a_large_batch_is_device_bound_either_way():
    base = ["serve", "simulate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--tp", "4",
            "--num-requests", "256", "--input-len", "512", "--output-len", "64", "--json"]
    runs = [json.loads(runner.invoke(app, base + extra).stdout)["metrics"] for extra in ([], ["--enforce-eager"])]
    assert runs[1]["output_tokens_per_s"] == pytest.approx(runs[0]["output_tokens_per_s"], rel=0.05)


def test_exporters_turn_graphs_off():
    plan = ServingPlan(enforce_eager=True)
    assert "--enforce-eager" in vllm.export("meta-llama/Llama-3.1-8B-Instruct", plan)
    assert "--disable-cuda-graph" in sglang.export("meta-llama/Llama-3.1-8B-Instruct", plan.model_copy(update={"engine": "sglang"}))
    assert "--enforce-eager" not in vllm.export("meta-llama/Llama-3.1-8B-Instruct", ServingPlan())
    piecewise = [sglang.export("meta-llama/Llama-3.1-8B-Instruct", ServingPlan(
        engine="sglang", engine_version=v, enforce_eager=True)) for v in ("0.5.9", "0.5.12", "0.5.15")]
    # only 0.5.10-0.5.14 keep their piecewise prefill graphs under --disable-cuda-graph
    assert ["--disable-piecewise-cuda-graph" in script for script in piecewise] == [False, True, False]
