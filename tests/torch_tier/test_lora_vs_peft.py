"""Adapter weights of meshplan.serving.cost.lora against peft: a LoRA of rank r on every attention
projection and every dense MLP projection of a small Llama (GQA, head_dim != hidden/heads) and
a small Qwen2 (q/k/v biases: LoRA adds none), counted as peft's trainable parameters.
Tolerance: exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from meshplan.model.load import from_config  # noqa: E402
from meshplan.serving.cost.lora import adapter_params  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 96, "intermediate_size": 200, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256,
              "max_position_embeddings": 512},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 256,
              "max_position_embeddings": 512},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("rank", [8, 16])
def test_adapter_params_match_peft(name, rank):
    config = CONFIGS[name]
    hf = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(hf)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=rank, target_modules=TARGETS, lora_alpha=rank))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert adapter_params(from_config(config), rank) == trainable
