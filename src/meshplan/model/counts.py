"""Parameter counts, forward FLOPs and KV-cache bytes derived from a `ModelSpec`.

Conventions (stated once, used everywhere):
- A parameter count is what `transformers` instantiates for the same config (tied weights once).
- Matmul FLOPs are 2 per multiply-accumulate; biases, norms and activations are not counted.
- Attention FLOPs are the two batched matmuls (scores and weighted values). `causal=True` counts
  only the keys each query may see (the causal triangle, limited by a sliding window), which is
  what FlashAttention-style kernels compute; `causal=False` counts the full square, which is what
  an eager implementation materialises.
"""

from __future__ import annotations

from collections import Counter

from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.memo import MISS, IdentityMemo
from meshplan.model.spec import AttentionSpec, DenseMLP, LayerSpec, ModelSpec, MoEMLP

BYTES_PER_ELEMENT = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}


def bytes_per_element(dtype: str) -> float:
    """Bytes one element of `dtype` occupies; a clear error for unknown dtypes."""
    try:
        return BYTES_PER_ELEMENT[dtype]
    except KeyError:
        valid = ", ".join(BYTES_PER_ELEMENT)
        raise ConfigError(f"unknown dtype {dtype!r}; valid: {valid}") from None


# ---------------------------------------------------------------- attention


def attention_matmul_params(attn: AttentionSpec, hidden: int) -> int:
    """Weights of the attention projections (no biases, no norms)."""
    if attn.mla is not None:
        m, nh = attn.mla, attn.num_heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = hidden * nh * qk if m.q_lora_rank is None else m.q_lora_rank * (hidden + nh * qk)
        kv = hidden * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv += m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + nh * m.v_head_dim * hidden
    q = hidden * attn.num_heads * attn.head_dim
    kv = hidden * attn.num_kv_heads * (attn.head_dim + attn.v_head_dim)
    return q + kv + attn.num_heads * attn.v_head_dim * hidden


def attention_other_params(attn: AttentionSpec, hidden: int) -> int:
    """Biases, query/key norms, latent norms and sinks of the attention block."""
    n = 0
    if attn.mla is not None:
        m = attn.mla
        n += m.kv_lora_rank + (m.q_lora_rank or 0)  # latent RMSNorms
        if attn.qkv_bias:  # DeepSeek's attention_bias: the two down-projections
            n += (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim
        if attn.o_bias:
            n += hidden
        return n
    if attn.qkv_bias:
        n += attn.num_heads * attn.head_dim + attn.num_kv_heads * (attn.head_dim + attn.v_head_dim)
    if attn.o_bias:
        n += hidden
    if attn.qk_norm == "per_head":
        n += 2 * attn.head_dim
    elif attn.qk_norm == "full_width":
        n += (attn.num_heads + attn.num_kv_heads) * attn.head_dim
    if attn.sinks:
        n += attn.num_heads
    return n


# ---------------------------------------------------------------- feed-forward


def mlp_matmul_params(mlp: DenseMLP, hidden: int) -> int:
    """Weights of one dense MLP."""
    return (3 if mlp.gated else 2) * hidden * mlp.intermediate_size


def mlp_bias_params(mlp: DenseMLP, hidden: int) -> int:
    """Biases of one dense MLP."""
    if not mlp.bias:
        return 0
    return (2 if mlp.gated else 1) * mlp.intermediate_size + hidden


def dense_mlp_params(mlp: DenseMLP, hidden: int) -> int:
    """All parameters of one dense MLP."""
    return mlp_matmul_params(mlp, hidden) + mlp_bias_params(mlp, hidden)


def router_params(moe: MoEMLP, hidden: int) -> int:
    """Router projection (and its bias) plus the shared-expert gate."""
    n = moe.num_experts * hidden + (moe.num_experts if moe.router_bias else 0)
    return n + (hidden if moe.shared_expert_gate else 0)


# ---------------------------------------------------------------- per layer


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one decoder layer by kind."""

    attention: int
    """Attention projections, biases, query/key norms and sinks."""
    mlp: int
    """Dense MLP (0 for an MoE layer)."""
    routed_experts: int
    """All routed experts of an MoE layer."""
    shared_experts: int
    """The shared expert MLP of an MoE layer."""
    router: int
    """Router and shared-expert gate."""
    norms: int
    """Hidden-width normalisations."""

    @property
    def total(self) -> int:
        """All parameters of the layer."""
        return (
            self.attention + self.mlp + self.routed_experts
            + self.shared_experts + self.router + self.norms
        )


def norm_params(width: int, kind: str) -> int:
    """Parameters of one normalisation over `width` features."""
    return width * (2 if kind == "layernorm" else 1)


_KINDS = IdentityMemo(256)


def layer_kinds(model: ModelSpec) -> tuple[int, ...]:
    """For each layer, the index of the first layer equal to it: the distinct layer kinds,
    computed once per model (comparing frozen layers by value is what costs)."""
    return _kinds_entry(model)[0]


def distinct_kinds(model: ModelSpec) -> tuple[int, ...]:
    """The distinct values of `layer_kinds` (one layer index per kind), ascending, once per model
    (`ModelSpec.is_moe` is asked for every plan a search resolves)."""
    return _kinds_entry(model)[1]


def _kinds_entry(model: ModelSpec) -> tuple:
    """(layer kinds, distinct kinds) of `model`, once per model."""
    hit = _KINDS.find(id(model), model)
    if hit is not MISS:
        return hit
    first: dict = {}
    kinds = tuple(first.setdefault(layer, i) for i, layer in enumerate(model.layers))
    return _KINDS.keep(id(model), (model,), (kinds, tuple(sorted(set(kinds)))))


_LAYER_PARAMS = IdentityMemo(4096)
"""layer_params by object identity (the plan search asks for the same layers thousands of times
and hashing nested frozen dataclasses costs more than the count); each entry keeps its layer and
model alive so an id is never reused while cached."""


def layer_params(layer: LayerSpec, model: ModelSpec) -> LayerParams:
    """Parameters of one decoder layer of `model`, by kind."""
    key = (id(layer), id(model))
    hit = _LAYER_PARAMS.find(key, layer, model)
    if hit is not MISS:
        return hit
    return _LAYER_PARAMS.keep(key, (layer, model), _layer_params(layer, model))


def _layer_params(layer: LayerSpec, model: ModelSpec) -> LayerParams:
    h = model.hidden_size
    attn = attention_matmul_params(layer.attention, h) + attention_other_params(layer.attention, h)
    norms = layer.num_norms * norm_params(h, model.norm)
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        return LayerParams(attn, dense_mlp_params(mlp, h), 0, 0, 0, norms)
    routed = mlp.num_experts * dense_mlp_params(mlp.expert, h)
    shared = dense_mlp_params(mlp.shared, h) if mlp.shared else 0
    return LayerParams(attn, 0, routed, shared, router_params(mlp, h), norms)


# ---------------------------------------------------------------- whole model


def embedding_params(model: ModelSpec) -> int:
    """Input token embedding plus any learned absolute position embedding."""
    return (model.vocab_size + model.learned_position_embeddings) * model.hidden_size


def lm_head_params(model: ModelSpec) -> int:
    """The output projection's own weights: 0 when tied to the input embedding."""
    return 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size


def final_norm_params(model: ModelSpec) -> int:
    """The normalisation after the last layer."""
    return norm_params(model.hidden_size, model.norm) if model.final_norm else 0


def total_params(model: ModelSpec) -> int:
    """Every parameter, as `transformers` instantiates the causal-LM model."""
    repeats = Counter(layer_kinds(model))  # one count per distinct layer, times its repeats
    layers = sum(n * layer_params(model.layers[k], model).total for k, n in repeats.items())
    return layers + embedding_params(model) + lm_head_params(model) + final_norm_params(model)


def inactive_expert_params(layer: LayerSpec, hidden: int) -> int:
    """Routed-expert parameters a single token does not touch in this layer."""
    if not isinstance(layer.mlp, MoEMLP):
        return 0
    return (layer.mlp.num_experts - layer.mlp.top_k) * dense_mlp_params(layer.mlp.expert, hidden)


def active_params(model: ModelSpec) -> int:
    """Parameters one token uses in a forward pass (dense models: all of them)."""
    idle = sum(inactive_expert_params(layer, model.hidden_size) for layer in model.layers)
    return total_params(model) - idle


# ---------------------------------------------------------------- FLOPs


def layer_matmul_params_per_token(layer: LayerSpec, hidden: int) -> int:
    """Weight elements one token multiplies through in this layer (routed: top-k experts)."""
    n = attention_matmul_params(layer.attention, hidden)
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        return n + mlp_matmul_params(mlp, hidden)
    n += mlp.num_experts * hidden + (hidden if mlp.shared_expert_gate else 0)
    n += mlp.top_k * mlp_matmul_params(mlp.expert, hidden)
    if mlp.shared is not None:
        n += mlp_matmul_params(mlp.shared, hidden)
    return n


def mean_visible_keys(seq_len: int, attn: AttentionSpec, causal: bool) -> float:
    """Average number of keys a query attends to in a sequence of `seq_len` tokens.

    Non-causal counts the full square (what eager attention materialises). Causal counts the
    triangle, limited by a sliding window or restarted at each attention chunk.
    """
    if not causal:
        return float(seq_len)
    window, chunk = attn.sliding_window, attn.attention_chunk
    if chunk is not None and chunk < seq_len:
        full, rest = divmod(seq_len, chunk)
        return (full * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2) / seq_len
    if window is None or window >= seq_len:
        return (seq_len + 1) / 2
    seen = window * (window + 1) / 2 + (seq_len - window) * window  # ramp, then a full window
    return seen / seq_len


def attention_flops_per_token(attn: AttentionSpec, seq_len: int, causal: bool) -> float:
    """Score and weighted-value matmul FLOPs for one query token of one layer."""
    keys = mean_visible_keys(seq_len, attn, causal)
    return 2.0 * attn.num_heads * (attn.head_dim + attn.v_head_dim) * keys


def matmul_flops_per_token(model: ModelSpec) -> int:
    """Forward matmul FLOPs per token outside attention scores: layers and LM head."""
    h = model.hidden_size
    repeats = Counter(layer_kinds(model))  # integers: grouping by distinct layer is exact
    weights = sum(n * layer_matmul_params_per_token(model.layers[k], h) for k, n in repeats.items())
    return 2 * (weights + model.vocab_size * h)


_FORWARD = IdentityMemo(1024)
"""forward_flops_per_token by model identity: every estimate asks it, and its float sum over the
layers is kept in layer order (the same bits as ever) rather than regrouped."""


def forward_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs per token for sequences of `seq_len` tokens (matmuls + attention)."""
    if seq_len < 1:
        raise ConfigError(f"seq_len must be a positive integer, got {seq_len}")
    key = (id(model), seq_len, causal)
    hit = _FORWARD.find(key, model)
    if hit is not MISS:
        return hit
    attn = sum(attention_flops_per_token(layer.attention, seq_len, causal) for layer in model.layers)
    return _FORWARD.keep(key, (model,), matmul_flops_per_token(model) + attn)


# ---------------------------------------------------------------- KV cache


def kv_elements_per_token(attn: AttentionSpec) -> int:
    """Cached elements per token for one layer (MLA: the latent plus the shared rope key)."""
    if attn.mla is not None:
        return attn.mla.kv_lora_rank + attn.mla.qk_rope_head_dim
    return attn.num_kv_heads * (attn.head_dim + attn.v_head_dim)


def kv_cache_bytes_per_token(model: ModelSpec, dtype: str = "bf16") -> float:
    """KV-cache bytes per token of context, every layer keeping every token."""
    return bytes_per_element(dtype) * sum(kv_elements_per_token(l.attention) for l in model.layers)


def kv_cache_bytes(model: ModelSpec, seq_len: int, dtype: str = "bf16") -> float:
    """KV-cache bytes for one sequence of `seq_len` tokens; sliding layers keep only their window."""
    total = 0
    for layer in model.layers:
        span = layer.attention.sliding_window or layer.attention.attention_chunk
        tokens = seq_len if span is None else min(seq_len, span)
        total += tokens * kv_elements_per_token(layer.attention)
    return bytes_per_element(dtype) * total
