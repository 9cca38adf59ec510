"""Mixture-of-experts families with standard attention: Mixtral, Qwen2/3-MoE, gpt-oss, Llama 4."""

from __future__ import annotations

from collections.abc import Callable

from meshplan.errors import ConfigError
from meshplan.model.config_view import ConfigView
from meshplan.model.families.common import (
    all_sliding_if_window, attention_spans, build_model, dense_mlp, num_layers, read_heads,
    standard_attention,
)
from meshplan.model.families.dense import qwen_pattern
from meshplan.model.families.registry import register
from meshplan.model.spec import AttentionSpec, DenseMLP, LayerSpec, ModelSpec, MoEMLP


def assemble(view: ConfigView, spans: list, make_attention: Callable[[tuple], AttentionSpec],
             is_moe: Callable[[int], bool], moe: MoEMLP, dense: DenseMLP | None) -> list[LayerSpec]:
    """Layers whose MLP is `moe` where `is_moe(i)`, else `dense`."""
    layers = []
    for i, span in enumerate(spans):
        mlp = moe if is_moe(i) else dense
        if mlp is None:
            raise AssertionError("a dense layer needs a dense MLP shape")
        layers.append(LayerSpec(attention=make_attention(span), mlp=mlp))
    return layers


def routed(view: ConfigView, *, experts_key: str, size_key: str, bias: bool = False,
           shared: DenseMLP | None = None, **kw) -> MoEMLP:
    """An MoE block with `experts_key` experts of width `size_key`, top `num_experts_per_tok`."""
    num = view.int(experts_key)
    top_k = view.int("num_experts_per_tok", "experts_per_token")
    if top_k > num:
        raise ConfigError(f"{view.where}: num_experts_per_tok={top_k} exceeds {experts_key}={num}")
    expert = dense_mlp(view, gated=True, bias=bias, size_key=size_key)
    return MoEMLP(num_experts=num, top_k=top_k, expert=expert, shared=shared, **kw)


@register("mixtral")
def parse_mixtral(view: ConfigView, name: str) -> ModelSpec:
    """Mixtral: Mistral attention, every layer a top-k MoE of SwiGLU experts."""
    heads, n = read_heads(view), num_layers(view)
    moe = routed(view, experts_key="num_local_experts", size_key="intermediate_size")
    spans = attention_spans(view, n, all_sliding_if_window(view))
    layers = assemble(view, spans, lambda s: standard_attention(heads, s), lambda i: True, moe, None)
    return build_model(view, name=name, family="mixtral", layers=layers)


def qwen_sparse_rule(view: ConfigView) -> Callable[[int], bool]:
    """Qwen-MoE: a layer is sparse unless listed in `mlp_only_layers` or off `decoder_sparse_step`."""
    dense_only = set(view.list("mlp_only_layers", default=[]))
    step = view.int("decoder_sparse_step", default=1)
    has_experts = view.int("num_experts", default=0, minimum=0) > 0
    return lambda i: has_experts and i not in dense_only and (i + 1) % step == 0


@register("qwen2_moe")
def parse_qwen2_moe(view: ConfigView, name: str) -> ModelSpec:
    """Qwen1.5/2-MoE: biased QKV, routed experts plus a gated shared expert."""
    heads, n = read_heads(view), num_layers(view)
    shared = dense_mlp(view, gated=True, bias=False, size_key="shared_expert_intermediate_size")
    moe = routed(view, experts_key="num_experts", size_key="moe_intermediate_size",
                 shared=shared, shared_expert_gate=True)
    dense = dense_mlp(view, gated=True, bias=False)
    qkv_bias = view.bool("qkv_bias", True)
    spans = attention_spans(view, n, qwen_pattern(view))
    layers = assemble(view, spans, lambda s: standard_attention(heads, s, qkv_bias=qkv_bias),
                      qwen_sparse_rule(view), moe, dense)
    return build_model(view, name=name, family="qwen2_moe", layers=layers)


@register("qwen3_moe")
def parse_qwen3_moe(view: ConfigView, name: str) -> ModelSpec:
    """Qwen3-MoE: per-head query/key RMSNorm, routed experts without a shared expert."""
    heads, n = read_heads(view), num_layers(view)
    moe = routed(view, experts_key="num_experts", size_key="moe_intermediate_size")
    dense = dense_mlp(view, gated=True, bias=False)
    bias = view.bool("attention_bias", False)
    spans = attention_spans(view, n, qwen_pattern(view))
    attention = lambda s: standard_attention(heads, s, qkv_bias=bias, o_bias=bias, qk_norm="per_head")
    layers = assemble(view, spans, attention, qwen_sparse_rule(view), moe, dense)
    return build_model(view, name=name, family="qwen3_moe", layers=layers)


@register("gpt_oss")
def parse_gpt_oss(view: ConfigView, name: str) -> ModelSpec:
    """gpt-oss: biased attention with sinks, alternating sliding layers, biased experts and router."""
    heads, n = read_heads(view), num_layers(view)
    moe = routed(view, experts_key="num_local_experts", size_key="intermediate_size",
                 bias=True, router_bias=True)
    bias = view.bool("attention_bias", True)
    alternate = lambda i: "sliding_attention" if i % 2 == 0 else "full_attention"
    spans = attention_spans(view, n, alternate)
    attention = lambda s: standard_attention(heads, s, qkv_bias=bias, o_bias=bias, sinks=True)
    layers = assemble(view, spans, attention, lambda i: True, moe, None)
    return build_model(view, name=name, family="gpt_oss", layers=layers)


def llama4_pattern(view: ConfigView, n: int) -> Callable[[int], str]:
    """Llama 4: rotary layers use chunked attention; every `no_rope_layer_interval`-th is global."""
    rope_flags = view.list("no_rope_layers", default=None)
    if rope_flags:
        if len(rope_flags) != n:
            raise ConfigError(f"{view.where}: no_rope_layers has {len(rope_flags)} entries, expected {n}")
        return lambda i: "chunked_attention" if rope_flags[i] else "full_attention"
    interval = view.int("no_rope_layer_interval", default=4)
    return lambda i: "full_attention" if (i + 1) % interval == 0 else "chunked_attention"


@register("llama4_text")
def parse_llama4(view: ConfigView, name: str) -> ModelSpec:
    """Llama 4 text: chunked attention on rotary layers, interleaved MoE with a shared expert."""
    heads, n = read_heads(view), num_layers(view)
    shared = dense_mlp(view, gated=True, bias=False)
    moe = routed(view, experts_key="num_local_experts", size_key="intermediate_size", shared=shared)
    dense = dense_mlp(view, gated=True, bias=False, size_key="intermediate_size_mlp")
    step = view.int("interleave_moe_layer_step", default=1)
    moe_layers = set(view.list("moe_layers", default=None) or range(step - 1, n, step))
    pattern = llama4_pattern(view, n)
    bias = view.bool("attention_bias", False)
    qk_norm = "l2" if view.bool("use_qk_norm", True) else "none"
    attention = lambda s: standard_attention(heads, s, qkv_bias=bias, o_bias=bias, qk_norm=qk_norm)
    spans = attention_spans(view, n, pattern)
    layers = assemble(view, spans, attention, lambda i: i in moe_layers, moe, dense)
    return build_model(view, name=name, family="llama4_text", layers=layers)
