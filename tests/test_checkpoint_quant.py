"""A checkpoint's quantization_config: parsed per module group, and priced in serving memory
and iteration time (meshplan.model.quant, meshplan.serving.cost.weights).

The inline configs copy the field layouts of public config.json files: gpt-oss (mxfp4),
DeepSeek-V3 (fp8 block 128x128), Qwen3-8B-FP8 (fp8 with modules_to_not_convert), an
llm-compressor FP8-dynamic, W4A16 and NVFP4 export (compressed-tensors), an AutoAWQ and an
AutoGPTQ export, and a bitsandbytes 4-bit save.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from meshplan import ServingPlan
from meshplan.errors import ConfigError, DoesNotFitError
from meshplan.hardware import Cluster
from meshplan.hardware.catalog import get_gpu
from meshplan.model import load_model
from meshplan.model.load import from_config, read_config_file
from meshplan.model.quant import NF4_BYTES_PER_PARAM, matches, read_quantization
from meshplan.serving.cost import kernels
from meshplan.serving.cost.constants import engine_constants
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.cost.memory import kv_layout, serving_memory, weight_bytes_per_gpu
from meshplan.serving.cost.weights import gemm_dtype, plan_precision
from meshplan.serving.search.candidates import native_dtypes
from meshplan.training.finetune import adapters

GIB = 2**30

GPT_OSS = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
DEEPSEEK_V3 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
               "weight_block_size": [128, 128]}
QWEN3_FP8 = {"activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"], "fmt": "e4m3",
             "quant_method": "fp8", "weight_block_size": [128, 128]}
CT_FP8_DYNAMIC = {
    "config_groups": {"group_0": {
        "input_activations": {"actorder": None, "block_structure": None, "dynamic": True, "group_size": None,
                              "num_bits": 8, "observer": None, "strategy": "token", "symmetric": True,
                              "type": "float"},
        "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": None,
                    "num_bits": 8, "observer": "minmax", "strategy": "channel", "symmetric": True,
                    "type": "float"}}},
    "format": "float-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None,
    "quant_method": "compressed-tensors", "quantization_status": "compressed"}
CT_W4A16 = {
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 128,
                    "num_bits": 4, "observer": "minmax", "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors"}
CT_NVFP4_MOE = {
    "config_groups": {"group_0": {
        "input_activations": {"dynamic": "local", "group_size": 16, "num_bits": 4,
                              "strategy": "tensor_group", "symmetric": True, "type": "float"},
        "targets": ["Linear"],
        "weights": {"dynamic": False, "group_size": 16, "num_bits": 4, "strategy": "tensor_group",
                    "symmetric": True, "type": "float"}}},
    "format": "nvfp4-pack-quantized", "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"],
    "quant_method": "compressed-tensors"}
AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
       "version": "gemm", "zero_point": True}
GPTQ = {"bits": 4, "damp_percent": 0.01, "desc_act": False, "group_size": 128, "quant_method": "gptq",
        "static_groups": False, "sym": True, "true_sequential": True}
BNB_NF4 = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
           "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
           "bnb_4bit_use_double_quant": True, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
           "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}


def catalog_path(name: str):
    return resources.files("meshplan.model").joinpath("catalog", f"{name}.json")


def _read(quant: dict):
    return read_quantization({"quantization_config": quant})


def test_gpt_oss_mxfp4_quantizes_only_the_experts():
    w = _read(GPT_OSS)
    assert w.experts.name == "mxfp4" and w.experts.bits == 4.25 and w.experts.activations is None
    assert (w.attention.bits, w.mlp.bits, w.router.bits) == (16, 16, 16)
    assert w.dtype == "fp4"


def test_deepseek_fp8_blocks_quantize_every_linear_with_fp8_math():
    w = _read(DEEPSEEK_V3)
    for group in ("attention", "mlp", "experts"):
        fmt = w.format(group)
        assert fmt.bits == pytest.approx(8 + 32 / 128**2) and fmt.activations == "fp8"
    assert w.router.bits == 16 and w.dtype == "fp8"
    assert _read(QWEN3_FP8).attention.name == "fp8 block 128x128"
    assert _read({"quant_method": "fp8", "activation_scheme": "static"}).mlp.bits == 8


def test_compressed_tensors_schemes():
    fp8 = _read(CT_FP8_DYNAMIC)
    assert fp8.attention.dtype == "fp8" and fp8.attention.activations == "fp8" and fp8.mlp.bits == 8
    w4 = _read(CT_W4A16)
    assert w4.mlp.dtype == "int4" and w4.mlp.activations is None
    assert w4.mlp.bits == pytest.approx(4 + 16 / 128)
    nv = _read(CT_NVFP4_MOE)  # attention ignored by regex; NVFP4: an fp8 scale per 16 values
    assert nv.attention.bits == 16 and nv.experts.bits == pytest.approx(4.5)
    assert nv.experts.activations == "fp4" and nv.experts.name == "nvfp4 g16"


def test_awq_gptq_and_bitsandbytes():
    for quant in (AWQ, GPTQ):
        w = _read(quant)
        assert w.mlp.bits == pytest.approx(4 + (16 + 4) / 128) and w.mlp.activations is None
        assert w.dtype == "int4"
    bnb = _read(BNB_NF4)
    assert bnb.attention.bits == pytest.approx(NF4_BYTES_PER_PARAM * 8)
    assert adapters.NF4_BYTES_PER_PARAM == NF4_BYTES_PER_PARAM  # QLoRA's NF4 layout, one constant
    assert _read({"quant_method": "bitsandbytes", "load_in_8bit": True}).mlp.bits == 8


def test_module_patterns_name_whole_components():
    assert matches("model.layers.*.self_attn", "model.layers.0.self_attn.q_proj")
    assert matches("gate", "model.layers.0.mlp.gate")
    assert not matches("gate", "model.layers.0.mlp.gate_proj")
    assert matches("re:.*mlp.gate$", "model.layers.0.mlp.gate")
    assert not matches("re:.*mlp.gate$", "model.layers.0.mlp.gate_proj")


def test_unknown_method_is_a_note_and_bf16():
    w = _read({"quant_method": "hqq", "nbits": 4})
    assert w.dtype == "bf16" and all(w.format(g).bits == 16 for g in ("attention", "mlp", "experts"))
    assert "quant_method 'hqq'" in w.notes[0] and "mxfp4" in w.notes[0]


@pytest.mark.parametrize("quant, field", [
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ({"quant_method": "gptq", "bits": 5}, "bits"),
    ({"quant_method": "compressed-tensors"}, "config_groups"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, "x"]}}}}, "block_structure"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": "lm_head"}, None),
])
def test_bad_fields_are_named(quant, field):
    if field is None:  # a single name is accepted as a one-element list
        assert _read(quant).experts.name == "mxfp4"
        return
    with pytest.raises(ConfigError, match=field):
        _read(quant)


def test_gpt_oss_checkpoint_size_matches_the_model_card():
    """gpt-oss model card (OpenAI, arXiv 2508.10925), Table 1: checkpoint size 60.8 GiB (120b)
    and 12.8 GiB (20b); MXFP4 experts (4.25 bits), everything else bf16. Tolerance 1%: the
    card rounds to 0.1 GiB and the checkpoint's expert biases are bf16."""
    for name, gib in (("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)):
        model = load_model(name)
        got = weight_bytes_per_gpu(model, ServingPlan(tp=1)) / GIB
        assert got == pytest.approx(gib, rel=0.01), name
        bf16 = weight_bytes_per_gpu(model, ServingPlan(weights_dtype="bf16")) / GIB
        assert bf16 > 3 * gib  # the flag wins over the checkpoint


def test_gpt_oss_120b_fits_one_h100_only_with_its_checkpoint_precision():
    model, gpu = load_model("gpt-oss-120b"), get_gpu("h100-sxm-80gb")
    args = {"utilization": 0.9, "block_size": 16, "max_tokens": 8192, "max_seqs": 256}
    mem = serving_memory(model, gpu, ServingPlan(), **args)
    assert mem.weights_bytes / GIB == pytest.approx(60.8, rel=0.01) and mem.num_blocks > 0
    with pytest.raises(DoesNotFitError, match="bf16 weights"):
        serving_memory(model, gpu, ServingPlan(weights_dtype="bf16"), **args)


def _decode_step(model_name: str, gpu: str, plan: ServingPlan, seqs: int = 32) -> float:
    model = load_model(model_name)
    cluster = Cluster.build(gpu=gpu, num_gpus=plan.gpus_per_replica)
    cost = IterationCost(model, cluster, plan, kv_layout(model, plan), engine_constants(plan.engine))
    return cost.linear(seqs)


def test_mxfp4_experts_decode_faster_on_hopper_through_bytes_only():
    """MXFP4 on Hopper is weight-only: the expert GEMMs stay in bf16 math, so a decode step
    (memory-bound: the weights are read once per step) gets faster by the bytes it saves."""
    auto = _decode_step("gpt-oss-120b", "h100-sxm-80gb", ServingPlan(tp=2))
    bf16 = _decode_step("gpt-oss-120b", "h100-sxm-80gb", ServingPlan(tp=2, weights_dtype="bf16"))
    assert auto < 0.6 * bf16
    w = plan_precision(load_model("gpt-oss-120b"), ServingPlan())
    for gpu in ("h100-sxm-80gb", "b200-180gb"):  # vLLM's default keeps bf16 activations
        assert gemm_dtype(w.experts, get_gpu(gpu).dtypes) == "bf16"


def test_fp8_checkpoint_runs_fp8_gemms_and_a_flag_overrides_it():
    model = load_model("deepseek-v3")
    assert plan_precision(model, ServingPlan()).experts.activations == "fp8"
    assert gemm_dtype(plan_precision(model, ServingPlan()).mlp, get_gpu("h100-sxm-80gb").dtypes) == "fp8"
    assert plan_precision(model, ServingPlan(weights_dtype="bf16")).mlp.bits == 16
    auto = _decode_step("deepseek-v3", "h200-sxm-141gb", ServingPlan(tp=8), seqs=256)
    flag = _decode_step("deepseek-v3", "h200-sxm-141gb", ServingPlan(tp=8, weights_dtype="fp8"), seqs=256)
    assert auto == pytest.approx(flag, rel=0.02)  # the same fp8 GEMMs (routers stay bf16)


def test_block_scaled_fp8_runs_at_the_modeled_fp8_rate():
    """Why a 128x128 weight_block_size gets no efficiency factor of its own: DeepGEMM's measured
    block-scaled GEMMs (kernel_rates.yaml, H800) land at 0.9-1.25x the model's fp8 rate."""
    assert 0.9 < kernels.block_scaled_fp8_over_model() < 1.25


def test_models_without_quantization_config_are_unchanged():
    model = load_model("llama-3.1-8b")
    assert model.weights is None
    assert weight_bytes_per_gpu(model, ServingPlan()) == weight_bytes_per_gpu(model, ServingPlan(weights_dtype="bf16"))
    assert native_dtypes(model) == ("bf16", "auto")
    assert native_dtypes(load_model("gpt-oss-120b")) == ("auto", "auto")


def test_search_offers_fp8_weights_only_where_they_shrink_the_checkpoint():
    from meshplan.serving.search.candidates import _dtypes

    h100 = Cluster.build(gpu="h100-sxm-80gb", num_gpus=1)
    assert ("fp8", "fp8") in _dtypes(load_model("llama-3.1-8b"), h100, True)
    for name in ("gpt-oss-120b", "deepseek-v3"):  # MXFP4 experts / fp8 already
        assert _dtypes(load_model(name), h100, True) == [("auto", "auto"), ("auto", "fp8")]


def test_quantization_config_of_a_multimodal_wrapper_is_read():
    config = {"model_type": "llama4", "quantization_config": CT_FP8_DYNAMIC, "text_config": {
        "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 1024, "intermediate_size_mlp": 1024, "vocab_size": 1000,
        "num_local_experts": 4, "num_experts_per_tok": 1}}
    assert from_config(config).weights.dtype == "fp8"


def test_model_show_reports_the_stored_weights():
    from typer.testing import CliRunner

    from meshplan.cli.app import app

    runner = CliRunner()
    shown = runner.invoke(app, ["model", "show", "gpt-oss-120b"])
    assert shown.exit_code == 0 and "60.8 GiB: experts mxfp4 (4.25 bits), rest bf16" in shown.output
    data = json.loads(runner.invoke(app, ["model", "show", "deepseek-v3", "--json"]).output)
    assert data["checkpoint_weights"]["quant_method"] == "fp8"
    assert data["checkpoint_weights"]["groups"]["router"]["bits_per_weight"] == 16
    plain = json.loads(runner.invoke(app, ["model", "show", "llama-3.1-8b", "--json"]).output)
    assert plain["checkpoint_weights"] is None


def test_serve_notes_an_unknown_quant_method(tmp_path):
    from typer.testing import CliRunner

    from meshplan.cli.app import app

    config = dict(read_config_file(catalog_path("llama-3.2-1b")))
    config["quantization_config"] = {"quant_method": "hqq", "nbits": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ["serve", "simulate", "--model", str(path), "--gpu", "h100-sxm-80gb", "--num-requests", "8",
            "--dataset", "random", "--input-len", "64", "--output-len", "8", "--request-rate", "4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    assert "quant_method 'hqq' is not modeled" in result.stderr and "priced in bf16" in result.stderr
    quiet = CliRunner().invoke(app, [*args, "--weights-dtype", "bf16"])  # a stated dtype: nothing assumed
    assert "hqq" not in quiet.stderr
