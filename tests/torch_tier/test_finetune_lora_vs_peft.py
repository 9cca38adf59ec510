"""LoRA trainable parameters against PEFT on real `transformers` models (CPU, exact).

Small random-init models of each family (tests/torch_tier/small_configs.py) and shrunk catalog
configs get `peft.LoraConfig(r, target_modules)` with the module names meshplan maps its target
names to; the trainable parameters PEFT leaves must equal `meshplan.model.lora.adapter_params`
to the parameter.

PEFT (>= 0.18 on transformers 5) re-maps gate_proj/up_proj/down_proj on the MoE families whose
experts transformers fused (qwen3_moe, deepseek_v2/v3, mixtral, ...) to the routed-expert
tensors and stops adapting the dense and shared-expert MLPs of the same names; meshplan keeps
the module meaning (dense and shared MLPs, routed experts frozen), so those families are compared
on their attention targets.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from meshplan.model import from_config  # noqa: E402
from meshplan.model.catalog_index import catalog_config  # noqa: E402
from meshplan.model.lora import adapter_params, peft_target_modules, target_names  # noqa: E402
from tests.torch_tier import hf_truth  # noqa: E402
from tests.torch_tier.small_configs import SMALL_CONFIGS  # noqa: E402

FAMILIES = ["llama", "llama_tied_bias", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text",
            "olmo2", "granite", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3",
            "phi3", "gpt2", "gpt_neox", "starcoder2", "nemotron", "gpt_oss"]
REMAPPED_MOE = {"qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "mixtral"}
CATALOG = ["llama-3.1-8b", "qwen3-8b", "mistral-7b", "gemma-2-9b", "mixtral-8x7b",
           "qwen1.5-moe-a2.7b", "deepseek-v2-lite"]


def _peft_trainable(config: dict, targets: list[str], rank: int) -> int:
    import torch

    hf = hf_truth.build_hf_config(config)
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32)
    lora = peft.LoraConfig(r=rank, target_modules=targets)
    wrapped = peft.get_peft_model(model, lora)
    return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)


def _shrunk(name: str, layers: int = 2) -> dict:
    config = catalog_config(name)
    text = config.get("text_config", config)
    text["num_hidden_layers"] = layers
    for key in ("layer_types", "mlp_only_layers"):
        if isinstance(text.get(key), list):
            text[key] = text[key][:layers]
    return config


def _targets(spec) -> tuple[str, ...]:
    names = target_names(spec)
    if spec.family in REMAPPED_MOE:
        return tuple(n for n in names if n in ("q", "k", "v", "kv", "o"))
    return names


def _check(config: dict, targets: tuple[str, ...], rank: int) -> None:
    spec = from_config(config)
    modules = peft_target_modules(spec, targets)
    assert adapter_params(spec, targets, rank) == _peft_trainable(config, modules, rank)


@pytest.mark.parametrize("name", FAMILIES)
def test_all_targets_exact(name):
    spec = from_config(SMALL_CONFIGS[name])
    _check(SMALL_CONFIGS[name], _targets(spec), 8)


@pytest.mark.parametrize("name", ["llama", "qwen2_moe", "deepseek_v3", "gpt2"])
@pytest.mark.parametrize("rank", [1, 16])
def test_first_target_exact(name, rank):
    spec = from_config(SMALL_CONFIGS[name])
    _check(SMALL_CONFIGS[name], target_names(spec)[:1], rank)


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_all_targets_exact(name):
    config = _shrunk(name)
    _check(config, _targets(from_config(config)), 16)


# ---------------------------------------------------------------- saved activations

SAVED_TOLERANCE = 0.03  # as the full-training activation test (CPU LayerNorm statistics differ)
SAVED_CASES = [("llama", "sdpa", ("q", "v")), ("llama", "eager", None), ("mistral", "sdpa", ("q", "v")),
               ("qwen3", "sdpa", None), ("olmo2", "sdpa", None), ("granite", "sdpa", ("o", "down")),
               ("phi3", "sdpa", ("qkv", "gate_up")), ("gpt2", "sdpa", None), ("gpt_neox", "sdpa", None),
               ("starcoder2", "sdpa", ("q", "v", "up")), ("gemma2", "eager", ("q", "v")),
               ("mixtral", "sdpa", ("q", "v")), ("qwen2_moe", "sdpa", None), ("qwen3_moe", "sdpa", ("q", "k", "v", "o"))]


@pytest.mark.parametrize("family, attention, targets", SAVED_CASES)
@pytest.mark.parametrize("batch, seq", [(1, 32), (2, 64)])
def test_saved_bytes_match_autograd_under_peft(family, attention, targets, batch, seq):
    """Bytes a decoder layer saves for backward with a frozen base and PEFT adapters (fp32, on a
    bf16 model), against `saved_tensors_hooks`. Layer 0 is left out: with frozen embeddings its
    input needs no gradient, so its first norm saves nothing (meshplan costs every layer as one
    that passes a gradient on)."""
    from meshplan.hardware import Cluster
    from meshplan.training import TrainingPlan, resolve_plan
    from meshplan.training.memory.activations import layer_activation_bytes
    from tests.torch_tier.hf_saved import build_train_model, measure_saved_bytes

    config = SMALL_CONFIGS[family]
    spec = from_config(config)
    targets = targets or target_names(spec)
    model = build_train_model(config, attention, "grouped_mm")
    lora = peft.LoraConfig(r=8, target_modules=peft_target_modules(spec, targets))
    wrapped = peft.get_peft_model(model, lora)
    measured = measure_saved_bytes(config, batch, seq, attention, experts_implementation="grouped_mm",
                                   model=wrapped).per_layer_bytes
    plan = TrainingPlan(framework="hf", attention=attention, micro_batch_size=batch, global_batch_size=batch,
                        seq_len=seq, method="lora", lora_rank=8, lora_targets=targets)
    resolved = resolve_plan(plan, spec, Cluster.build("h100-sxm-80gb", 1))
    for i in range(1, spec.num_layers):
        predicted = layer_activation_bytes(spec.layers[i], spec, resolved)
        assert predicted == pytest.approx(measured[i], rel=SAVED_TOLERANCE), f"layer {i}"


# ---------------------------------------------------------------- host ops


def _llama_ops(layers: int, targets: list[str] | None):
    import torch
    import transformers

    from tests.torch_tier.test_dispatch_counts import _Count

    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=8,
                                   num_key_value_heads=2, num_hidden_layers=layers, vocab_size=1000)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                          dtype=torch.bfloat16).train()
    if targets is not None:
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=targets))
    tokens = torch.randint(0, 1000, (2, 64))
    forward, backward = _Count(), _Count()
    with forward:
        loss = model(input_ids=tokens, labels=tokens).loss
    with backward:
        loss.backward()
    return forward.ops, backward.ops


def _layer_ops(targets):
    one, two = _llama_ops(1, targets), _llama_ops(2, targets)
    return [sum((b - a).values()) for a, b in zip(one, two)]


@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], [
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]])
def test_lora_layer_ops_match_the_kernel_profile(targets):
    """Ops dispatched per layer pass under PEFT vs kernels.lora_host_s on the measured full-training
    counts (+-10%, as test_dispatch_counts)."""
    from meshplan.costs.host import HOST_OP_S
    from meshplan.training.time.kernels import lora_host_s

    full = _layer_ops(None)
    predicted = lora_host_s("pytorch-eager", len(targets), tuple(n * HOST_OP_S for n in full))
    measured = _layer_ops(targets)
    assert [p / HOST_OP_S for p in predicted] == pytest.approx(measured, rel=0.10)
