"""DeepSeek-V2/V3 (and Kimi K2, which shares V3's shape): latent attention and fine-grained MoE."""

from __future__ import annotations

from meshplan.model.config_view import ConfigView
from meshplan.model.families.common import build_model, dense_mlp, num_layers
from meshplan.model.families.registry import register
from meshplan.model.spec import AttentionSpec, DenseMLP, LayerSpec, MLASpec, ModelSpec, MoEMLP


def read_mla(view: ConfigView) -> AttentionSpec:
    """Multi-head latent attention from the config's LoRA ranks and head widths."""
    mla = MLASpec(
        q_lora_rank=view.opt_int("q_lora_rank"),
        kv_lora_rank=view.int("kv_lora_rank"),
        qk_nope_head_dim=view.int("qk_nope_head_dim"),
        qk_rope_head_dim=view.int("qk_rope_head_dim"),
        v_head_dim=view.int("v_head_dim"),
    )
    heads = view.int("num_attention_heads")
    bias = view.bool("attention_bias", False)
    return AttentionSpec(
        num_heads=heads, num_kv_heads=heads,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
        qkv_bias=bias, o_bias=bias, mla=mla,
    )


def read_deepseek_moe(view: ConfigView, mlp_bias: bool) -> MoEMLP:
    """Routed experts plus `n_shared_experts` fused into one shared MLP."""
    width = view.int("moe_intermediate_size")
    shared_count = view.int("n_shared_experts", default=0, minimum=0)
    shared = None
    if shared_count:
        shared = DenseMLP(intermediate_size=width * shared_count, gated=True, bias=mlp_bias,
                          activation=view.str("hidden_act", default="silu"))
    return MoEMLP(
        num_experts=view.int("n_routed_experts", "num_local_experts"),
        top_k=view.int("num_experts_per_tok"),
        expert=dense_mlp(view, gated=True, bias=False, size=width),
        shared=shared,
        **route_groups(view),
    )


def route_groups(view: ConfigView) -> dict[str, int]:
    """Group-limited routing (`n_group`, `topk_group`; DeepSeek-V2's group_limited_greedy and
    V3's node-limited routing): unlimited (1, 1) when the config has no groups."""
    groups = view.int("n_group", default=1)
    return {"n_group": groups, "topk_group": min(groups, view.int("topk_group", default=groups))}


def is_moe_layer(view: ConfigView):
    """DeepSeek's rule: MoE from `first_k_dense_replace` on, every `moe_layer_freq`-th layer."""
    first = view.int("first_k_dense_replace", default=0, minimum=0)
    freq = view.int("moe_layer_freq", default=1)
    return lambda i: i >= first and i % freq == 0


@register("deepseek_v2", "deepseek_v3", "kimi_k2")
def parse_deepseek(view: ConfigView, name: str) -> ModelSpec:
    """DeepSeek-V2/V3 family."""
    family = view.str("model_type", default="deepseek_v3")
    mlp_bias = view.bool("mlp_bias", False) if family == "deepseek_v2" else False
    attention = read_mla(view)
    moe = read_deepseek_moe(view, mlp_bias)
    dense = dense_mlp(view, gated=True, bias=mlp_bias)
    rule = is_moe_layer(view)
    layers = [LayerSpec(attention=attention, mlp=moe if rule(i) else dense)
              for i in range(num_layers(view))]
    mtp = view.int("num_nextn_predict_layers", default=0, minimum=0)
    return build_model(view, name=name, family=family, layers=layers, mtp_layers=mtp)
