"""Pieces every family parser shares: head shapes, rotary settings, attention windows, the model shell."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.model.config_view import ConfigView
from meshplan.model.spec import AttentionSpec, DenseMLP, LayerSpec, ModelSpec, NormKind

Span = tuple[int | None, int | None]
ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True, slots=True)
class Heads:
    """Query heads, key/value heads and per-head width of a standard (non-MLA) attention."""

    num_heads: int
    num_kv_heads: int
    head_dim: int


def read_heads(view: ConfigView, head_dim_key: str | None = "head_dim") -> Heads:
    """Heads from the config, checking that key/value heads divide query heads."""
    hidden = view.int("hidden_size", "n_embd", "d_model")
    heads = view.int("num_attention_heads", "n_head")
    kv = view.int("num_key_value_heads", "num_kv_heads", default=heads)
    if heads % kv:
        raise ConfigError(
            f"{view.where}: num_attention_heads={heads} is not divisible by "
            f"num_key_value_heads={kv}; key/value heads must divide query heads"
        )
    if head_dim_key and view.has(head_dim_key):
        return Heads(heads, kv, view.int(head_dim_key))
    if hidden % heads:
        raise ConfigError(
            f"{view.where}: hidden_size={hidden} is not divisible by num_attention_heads={heads}; "
            f"set head_dim or use a head count that divides {hidden}"
        )
    return Heads(heads, kv, hidden // heads)


def read_rope(view: ConfigView) -> tuple[float | None, dict | None]:
    """Rotary base and scaling from `rope_theta`/`rope_scaling` or transformers 5 `rope_parameters`."""
    params = view.mapping("rope_parameters")
    if params is not None:
        sub = ConfigView(params, f"{view.where}.rope_parameters")
        theta = sub.float("rope_theta", default=None)
        kind = params.get("rope_type", "default")
        return theta, (None if kind == "default" else params)
    theta = view.float("rope_theta", "rotary_emb_base", default=None)
    return theta, view.mapping("rope_scaling")


def layer_kinds(view: ConfigView, n: int, default: Callable[[int], str]) -> list[str]:
    """Per-layer attention kind from `layer_types`, else from the family's default pattern."""
    kinds = view.list("layer_types", default=None)
    if kinds is None:
        return [default(i) for i in range(n)]
    if len(kinds) != n:
        raise ConfigError(
            f"{view.where}: layer_types has {len(kinds)} entries but num_hidden_layers is {n}"
        )
    for i, kind in enumerate(kinds):
        if kind not in ATTENTION_KINDS:
            raise ConfigError(
                f"{view.where}: layer_types[{i}] = {kind!r} is not supported; "
                f"supported: {', '.join(ATTENTION_KINDS)}"
            )
    return kinds


def attention_spans(view: ConfigView, n: int, default: Callable[[int], str]) -> list[Span]:
    """Per-layer (sliding window, attention chunk) from layer kinds; (None, None) = full attention."""
    window = view.opt_int("sliding_window", minimum=0) or None
    chunk = view.opt_int("attention_chunk_size")
    spans = {"full_attention": (None, None), "sliding_attention": (window, None),
             "chunked_attention": (None, chunk)}
    return [spans[kind] for kind in layer_kinds(view, n, default)]


def all_sliding_if_window(view: ConfigView) -> Callable[[int], str]:
    """Default pattern of Mistral-style configs: every layer slides when `sliding_window` is set."""
    kind = "sliding_attention" if view.opt_int("sliding_window", minimum=0) else "full_attention"
    return lambda i: kind


def full_attention(i: int) -> str:
    """Default pattern: every layer attends to the full context."""
    return "full_attention"


def dense_mlp(view: ConfigView, *, gated: bool, bias: bool, size_key: str = "intermediate_size",
              act_keys: tuple[str, ...] = ("hidden_act",), size: int | None = None) -> DenseMLP:
    """A dense MLP block from the config's intermediate size and activation."""
    width = size if size is not None else view.int(size_key)
    act = view.str(*act_keys, default="silu")
    return DenseMLP(intermediate_size=width, gated=gated, bias=bias, activation=act)


def standard_attention(heads: Heads, span: Span = (None, None), **kw) -> AttentionSpec:
    """A non-MLA attention with the given heads and span; `kw` sets biases, norms, sinks."""
    return AttentionSpec(
        num_heads=heads.num_heads, num_kv_heads=heads.num_kv_heads, head_dim=heads.head_dim,
        v_head_dim=heads.head_dim, sliding_window=span[0], attention_chunk=span[1], **kw,
    )


def num_layers(view: ConfigView) -> int:
    """Decoder layer count."""
    return view.int("num_hidden_layers", "n_layer", "num_layers")


def build_model(view: ConfigView, *, name: str, family: str, layers: list[LayerSpec],
                norm: NormKind = "rmsnorm", tie_default: bool = False, **kw) -> ModelSpec:
    """Wrap parsed layers in a ModelSpec with the config's shell fields (vocab, rotary, tying)."""
    theta, scaling = read_rope(view)
    return ModelSpec(
        name=name, family=family, layers=tuple(layers), norm=norm,
        hidden_size=view.int("hidden_size", "n_embd", "d_model"),
        vocab_size=view.int("vocab_size"),
        tie_word_embeddings=view.bool("tie_word_embeddings", tie_default),
        max_position_embeddings=view.opt_int("max_position_embeddings", "n_positions", "seq_length"),
        rope_theta=theta, rope_scaling=scaling, **kw,
    )
