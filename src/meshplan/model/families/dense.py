"""Dense decoder families: one `Style` row per Hugging Face `model_type`, one parser for all of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from meshplan.model.config_view import ConfigView
from meshplan.model.families.common import (
    all_sliding_if_window, attention_spans, build_model, dense_mlp, full_attention, num_layers,
    read_heads, standard_attention,
)
from meshplan.model.families.registry import register
from meshplan.model.spec import LayerSpec, ModelSpec, NormKind, QKNorm

Flag = bool | tuple[str, bool]
"""A constant, or (config key, default when the key is absent)."""
Pattern = Callable[[ConfigView], Callable[[int], str]]
"""Given the config, the default attention kind of layer i when `layer_types` is absent."""


def flag(view: ConfigView, value: Flag) -> bool:
    """Resolve a Flag against the config."""
    return value if isinstance(value, bool) else view.bool(*value)


def qwen_pattern(view: ConfigView) -> Callable[[int], str]:
    """Qwen2/3: layers from `max_window_layers` on slide when `use_sliding_window` is set."""
    if not view.bool("use_sliding_window", False):
        return full_attention
    first = view.int("max_window_layers", default=0, minimum=0)
    return lambda i: "sliding_attention" if i >= first else "full_attention"


def every_nth_full(view: ConfigView, key: str, default: int) -> Callable[[int], str]:
    """Gemma-style: every n-th layer is global, the others slide."""
    n = view.int(key, default=default)
    return lambda i: "full_attention" if (i + 1) % n == 0 else "sliding_attention"


@dataclass(frozen=True, slots=True, kw_only=True)
class Style:
    """How one dense family lays out its decoder layer."""

    qkv_bias: Flag = ("attention_bias", False)
    o_bias: Flag = ("attention_bias", False)
    mlp_bias: Flag = ("mlp_bias", False)
    qk_norm: QKNorm = "none"
    num_norms: int = 2
    norm: NormKind = "rmsnorm"
    gated: bool = True
    tie_default: bool = False
    act_keys: tuple[str, ...] = ("hidden_act",)
    pattern: Pattern = lambda view: full_attention
    parallel_residual: Flag = False


NO_BIAS = dict(qkv_bias=False, o_bias=False, mlp_bias=False)
ALL_BIAS_KEY = dict(qkv_bias=("use_bias", True), o_bias=("use_bias", True), mlp_bias=("use_bias", True))

STYLES: dict[str, Style] = {
    "llama": Style(),
    "granite": Style(),
    "mistral": Style(**NO_BIAS, pattern=all_sliding_if_window),
    "phi3": Style(**NO_BIAS, pattern=all_sliding_if_window),
    "qwen2": Style(qkv_bias=True, o_bias=False, mlp_bias=False, pattern=qwen_pattern),
    "qwen3": Style(mlp_bias=False, qk_norm="per_head", pattern=qwen_pattern),
    "olmo2": Style(mlp_bias=False, qk_norm="full_width"),
    "gemma2": Style(
        mlp_bias=False, num_norms=4, tie_default=True, act_keys=("hidden_activation", "hidden_act"),
        pattern=lambda v: (lambda i: "sliding_attention" if i % 2 == 0 else "full_attention"),
    ),
    "gemma3_text": Style(
        mlp_bias=False, qk_norm="per_head", num_norms=4, tie_default=True,
        act_keys=("hidden_activation", "hidden_act"),
        pattern=lambda v: every_nth_full(v, "sliding_window_pattern", 6),
    ),
    "starcoder2": Style(**ALL_BIAS_KEY, norm="layernorm", gated=False, tie_default=True,
                        pattern=all_sliding_if_window),
    "nemotron": Style(norm="layernorm", gated=False),
    "gpt_neox": Style(qkv_bias=("attention_bias", True), o_bias=("attention_bias", True),
                      mlp_bias=True, norm="layernorm", gated=False,
                      parallel_residual=("use_parallel_residual", True)),
}


def parse_styled(view: ConfigView, name: str, family: str, style: Style) -> ModelSpec:
    """Build a dense ModelSpec for a family described by `style`."""
    heads = read_heads(view)
    n = num_layers(view)
    mlp = dense_mlp(view, gated=style.gated, bias=flag(view, style.mlp_bias), act_keys=style.act_keys)
    spans = attention_spans(view, n, style.pattern(view))
    layers = [
        LayerSpec(
            attention=standard_attention(
                heads, span, qkv_bias=flag(view, style.qkv_bias),
                o_bias=flag(view, style.o_bias), qk_norm=style.qk_norm,
            ),
            mlp=mlp, num_norms=style.num_norms,
        )
        for span in spans
    ]
    return build_model(
        view, name=name, family=family, layers=layers, norm=style.norm,
        tie_default=style.tie_default, parallel_residual=flag(view, style.parallel_residual),
    )


def _register_styles() -> None:
    for family, style in STYLES.items():
        register(family)(
            lambda view, name, family=family, style=style: parse_styled(view, name, family, style)
        )


_register_styles()


@register("gpt2")
def parse_gpt2(view: ConfigView, name: str) -> ModelSpec:
    """GPT-2: learned positions, LayerNorm with biases, biased fused QKV and a 4x GELU MLP."""
    hidden = view.int("n_embd", "hidden_size")
    heads = read_heads(view, head_dim_key=None)
    width = view.int("n_inner", "intermediate_size", default=4 * hidden)
    mlp = dense_mlp(view, gated=False, bias=True, size=width,
                    act_keys=("activation_function", "hidden_act"))
    attention = standard_attention(heads, qkv_bias=True, o_bias=True)
    layers = [LayerSpec(attention=attention, mlp=mlp)] * num_layers(view)
    return build_model(
        view, name=name, family="gpt2", layers=layers, norm="layernorm", tie_default=True,
        learned_position_embeddings=view.int("n_positions", "max_position_embeddings"),
    )
