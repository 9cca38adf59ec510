"""The family-free mapping of run records (SCHEMA.md): a config with no `model_type`.

Gated MLPs (SwiGLU/GeGLU) get RMSNorm, others LayerNorm; biases only where `attention_bias` or
`mlp_bias` say so; MoE when an expert count is given; latent attention when `kv_lora_rank` is.
"""

from __future__ import annotations

from meshplan.model.config_view import ConfigView
from meshplan.model.families.common import (
    all_sliding_if_window, attention_spans, build_model, dense_mlp, num_layers, read_heads,
    standard_attention,
)
from meshplan.model.families.deepseek import is_moe_layer, read_mla, route_groups
from meshplan.model.families.registry import register
from meshplan.model.spec import DenseMLP, ModelSpec, MoEMLP, LayerSpec

GATED_ACTIVATIONS = ("silu", "swish", "swiglu", "geglu")
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


def read_generic_moe(view: ConfigView, gated: bool, act: str) -> MoEMLP | None:
    """The MoE block, or None when the mapping names no experts."""
    experts = next((view.int(k) for k in EXPERT_KEYS if view.has(k)), 0)
    if not experts:
        return None
    width = view.int("moe_intermediate_size", "intermediate_size")
    count = view.int("n_shared_experts", default=0, minimum=0)
    shared_width = view.int("shared_expert_intermediate_size", default=width * count, minimum=0)
    shared = DenseMLP(intermediate_size=shared_width, gated=gated, activation=act) if shared_width else None
    return MoEMLP(
        num_experts=experts, top_k=view.int("num_experts_per_tok"),
        expert=DenseMLP(intermediate_size=width, gated=gated, activation=act), shared=shared,
        **route_groups(view),
    )


@register("generic")
def parse_generic(view: ConfigView, name: str) -> ModelSpec:
    """A decoder described only by the shape keys of SCHEMA.md."""
    act = view.str("hidden_act", default="silu")
    gated = view.bool("gated_mlp", act in GATED_ACTIVATIONS)
    mlp_bias = view.bool("mlp_bias", False)
    dense = dense_mlp(view, gated=gated, bias=mlp_bias)
    moe = read_generic_moe(view, gated, act)
    rule = is_moe_layer(view)
    n = num_layers(view)
    if view.has("kv_lora_rank"):
        attentions = [read_mla(view)] * n
    else:
        heads, bias = read_heads(view), view.bool("attention_bias", False)
        spans = attention_spans(view, n, all_sliding_if_window(view))
        attentions = [standard_attention(heads, s, qkv_bias=bias, o_bias=bias) for s in spans]
    layers = [
        LayerSpec(attention=a, mlp=moe if moe is not None and rule(i) else dense)
        for i, a in enumerate(attentions)
    ]
    norm = view.choice("norm_type", ("rmsnorm", "layernorm"), "rmsnorm" if gated else "layernorm")
    return build_model(view, name=name, family="generic", layers=layers, norm=norm)
