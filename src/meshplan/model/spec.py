"""The model architecture as meshplan sees it: typed, immutable, one entry per decoder layer.

A `ModelSpec` is built from a Hugging Face `config.json` by a family parser (see
`meshplan.model.families`); everything the cost and memory models need (parameter counts,
FLOPs, KV-cache bytes) is derived from it in `meshplan.model.counts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from meshplan.model.quant import WeightPrecision

NormKind = Literal["rmsnorm", "layernorm"]
QKNorm = Literal["none", "per_head", "full_width", "l2"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value projections."""

    q_lora_rank: int | None
    """Rank of the query down-projection; None means a direct hidden -> heads projection."""
    kv_lora_rank: int
    """Width of the compressed key/value latent that the KV cache stores."""
    qk_nope_head_dim: int
    """Per-head query/key width without rotary position encoding."""
    qk_rope_head_dim: int
    """Per-head query/key width carrying rotary encoding (shared across heads for keys)."""
    v_head_dim: int
    """Per-head value width."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSpec:
    """Self-attention of one decoder layer."""

    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (equal to num_heads for MHA, 1 for MQA, between for GQA)."""
    head_dim: int
    """Per-head query/key width (MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    v_head_dim: int
    """Per-head value width (equal to head_dim except for MLA)."""
    qkv_bias: bool = False
    """Whether the query, key and value projections carry a bias."""
    o_bias: bool = False
    """Whether the output projection carries a bias."""
    qk_norm: QKNorm = "none"
    """Normalisation of queries and keys: RMSNorm over each head, over the full width, or L2."""
    sliding_window: int | None = None
    """Tokens a query may look back on this layer; None for full (global) attention."""
    attention_chunk: int | None = None
    """Chunked attention (Llama 4): queries see only earlier keys of their own chunk of this size."""
    sinks: bool = False
    """Learned per-head attention sink logits (gpt-oss)."""
    mla: MLASpec | None = None
    """Multi-head latent attention shape, when the layer uses it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DenseMLP:
    """A feed-forward block applied to every token."""

    intermediate_size: int
    """Width of the hidden (up-projected) activation."""
    gated: bool
    """True for GLU variants (SwiGLU, GeGLU): a gate and an up projection."""
    bias: bool = False
    """Whether the projections carry biases."""
    activation: str = "silu"
    """Activation function name as in the Hugging Face config."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MoEMLP:
    """A mixture-of-experts block: a router, routed experts and optional shared experts."""

    num_experts: int
    """Routed experts."""
    top_k: int
    """Routed experts each token is sent to."""
    expert: DenseMLP
    """Shape of one routed expert."""
    shared: DenseMLP | None = None
    """The always-active shared expert MLP (its width sums all shared experts), if any."""
    router_bias: bool = False
    """Whether the router projection carries a bias."""
    shared_expert_gate: bool = False
    """A learned sigmoid gate (hidden -> 1) scaling the shared expert's output (Qwen2-MoE)."""
    n_group: int = 1
    """Equal groups of routed experts for group-limited routing (DeepSeek's `n_group`)."""
    topk_group: int = 1
    """Groups one token's experts may come from (DeepSeek's `topk_group`; with experts grouped
    by node, DeepSeek-V3 sends each token to at most 4 nodes). Equal to n_group: unlimited."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerSpec:
    """One decoder layer."""

    attention: AttentionSpec
    """The self-attention block."""
    mlp: DenseMLP | MoEMLP
    """The feed-forward block."""
    num_norms: int = 2
    """Hidden-width normalisation layers inside the layer (pre-norm: 2; Gemma 2/3: 4)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only language model, one `LayerSpec` per layer."""

    name: str
    """Display name (catalog short name or the config's `_name_or_path`)."""
    family: str
    """Hugging Face `model_type` of the text model (e.g. `llama`, `deepseek_v3`)."""
    hidden_size: int
    """Width of the residual stream."""
    vocab_size: int
    """Rows of the token embedding and the LM head."""
    layers: tuple[LayerSpec, ...]
    """The decoder layers, in order."""
    norm: NormKind = "rmsnorm"
    """Kind of every hidden-width normalisation; layernorm carries a bias."""
    tie_word_embeddings: bool = False
    """The LM head reuses the input embedding matrix."""
    learned_position_embeddings: int = 0
    """Rows of a learned absolute position embedding (GPT-2), 0 with rotary encodings."""
    final_norm: bool = True
    """A normalisation after the last layer."""
    parallel_residual: bool = False
    """Attention and MLP read the same input and add to the residual together (GPT-NeoX)."""
    max_position_embeddings: int | None = None
    """Longest context the config declares."""
    rope_theta: float | None = None
    """Rotary base frequency, when rotary encodings are used."""
    rope_scaling: dict | None = field(default=None, compare=False, hash=False)
    """Rotary scaling parameters as in the config (type, factor, ...)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules the checkpoint carries beside the causal LM (DeepSeek-V3's
    `num_nextn_predict_layers`): a decoder layer each, usable as a speculative drafter. Not part
    of the causal LM's parameters (transformers drops them)."""
    weights: WeightPrecision | None = None
    """Weight precision per module group read from the checkpoint's `quantization_config`
    (meshplan.model.quant); None: the checkpoint holds 16-bit weights."""

    @property
    def num_layers(self) -> int:
        """Number of decoder layers."""
        return len(self.layers)

    @property
    def is_moe(self) -> bool:
        """True when any layer routes tokens to experts."""
        from meshplan.model.counts import distinct_kinds  # distinct layers, cached per model

        return any(isinstance(self.layers[k].mlp, MoEMLP) for k in distinct_kinds(self))

    @property
    def uses_mla(self) -> bool:
        """True when the attention is multi-head latent attention."""
        from meshplan.model.counts import distinct_kinds

        return any(self.layers[k].attention.mla is not None for k in distinct_kinds(self))

    # Derived quantities (computed in meshplan.model.counts).

    @property
    def params_total(self) -> int:
        """All parameters, as `transformers` instantiates the causal-LM model."""
        from meshplan.model import counts

        return counts.total_params(self)

    @property
    def params_active(self) -> int:
        """Parameters one token uses (MoE: only its top-k routed experts)."""
        from meshplan.model import counts

        return counts.active_params(self)

    @property
    def params_embedding(self) -> int:
        """Input token embedding plus learned position embedding (not the untied LM head)."""
        from meshplan.model import counts

        return counts.embedding_params(self)

    @property
    def params_lm_head(self) -> int:
        """The untied LM head's own weights (0 when tied)."""
        from meshplan.model import counts

        return counts.lm_head_params(self)

    def flops_per_token_forward(self, seq_len: int, causal: bool = True) -> float:
        """Forward FLOPs per token at `seq_len` (matmuls + attention; see `counts`)."""
        from meshplan.model import counts

        return counts.forward_flops_per_token(self, seq_len, causal)

    def kv_cache_bytes_per_token(self, dtype: str = "bf16") -> float:
        """KV-cache bytes per token of context (MLA: the latent cache)."""
        from meshplan.model import counts

        return counts.kv_cache_bytes_per_token(self, dtype)
