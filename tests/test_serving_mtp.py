"""Speculative decoding with a model's own multi-token-prediction module (DeepSeek-V3 MTP):
the parsed module count, its draft cost, its weights, the engines' flags, and the error for a
model without one."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.export.serving import sglang, vllm
from meshplan.model import counts
from meshplan.serving.cost.constants import engine_constants
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.cost.memory import kv_layout, weight_bytes_per_gpu
from meshplan.serving.plan import ServingPlan

DSV3 = load_model("deepseek-v3")
MTP = ServingPlan(engine="sglang", tp=8, weights_dtype="fp8", speculative_tokens=2, acceptance_rate=0.8,
                  speculative_method="mtp")
runner = CliRunner()


def test_the_config_declares_one_mtp_module():
    assert DSV3.mtp_layers == 1  # num_nextn_predict_layers
    assert load_model("llama-3.1-8b").mtp_layers == 0


def test_an_mtp_draft_is_one_moe_layer_a_projection_and_the_head():
    cluster = Cluster.build("b200-180gb", 8)
    cost = IterationCost(DSV3, cluster, MTP, kv_layout(DSV3, MTP), engine_constants("sglang"))
    h = DSV3.hidden_size
    expected = cost._layer(DSV3.layers[-1], 1) + cost._gemm(1, h, 2 * h) + cost.head(1) + cost.k.layer_s
    assert cost.draft(1) == pytest.approx(expected)
    eagle = IterationCost(DSV3, cluster, MTP.model_copy(update={"speculative_method": "eagle"}),
                          kv_layout(DSV3, MTP), engine_constants("sglang"))
    assert cost.draft(1) > eagle.draft(1)  # the MTP layer is an MoE layer, EAGLE's the first (dense)


def test_mtp_weights_join_the_replica():
    plain = weight_bytes_per_gpu(DSV3, MTP.model_copy(update={"speculative_tokens": 0}))
    layer = counts.layer_params(DSV3.layers[-1], DSV3)
    extra = weight_bytes_per_gpu(DSV3, MTP) - plain
    assert extra == pytest.approx((layer.total + 2 * DSV3.hidden_size ** 2) / 8, rel=0.01)  # fp8, tp 8


def test_engines_load_the_checkpoints_own_module():
    text = vllm.export("deepseek-ai/DeepSeek-V3", MTP.model_copy(update={"engine": "vllm"}))
    assert '\\"method\\": \\"mtp\\"' in text and "DRAFT_MODEL" not in text
    text = sglang.export("deepseek-ai/DeepSeek-V3", MTP)
    assert "--speculative-algorithm NEXTN" in text and "--speculative-draft-model-path" not in text


def test_mtp_cuts_low_batch_decode_time_and_needs_a_module():
    base = ["serve", "simulate", "--model", "deepseek-v3", "--gpu", "b200-180gb", "--tp", "8",
            "--weights-dtype", "fp8", "--engine", "sglang", "--concurrency", "1", "--num-requests", "4",
            "--input-len", "500", "--output-len", "200", "--json"]
    plain = json.loads(runner.invoke(app, base).stdout)["metrics"]["tpot_ms"]["mean"]
    mtp = runner.invoke(app, base + ["--speculative-tokens", "2", "--acceptance-rate", "0.8",
                                     "--speculative-method", "mtp"])
    assert mtp.exit_code == 0, mtp.output
    assert json.loads(mtp.stdout)["metrics"]["tpot_ms"]["mean"] < 0.7 * plain
    bad = runner.invoke(app, ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--speculative-tokens", "2", "--acceptance-rate", "0.8", "--speculative-method", "mtp"])
    assert bad.exit_code == 2 and "has no multi-token-prediction module" in bad.stderr
