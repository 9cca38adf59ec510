"""Bits of a model's weights as its checkpoint stores them, per decoder layer and in total.

Each group of a layer's weights takes its own width from a `WeightPrecision`
(meshplan.model.quant): the attention projections, the dense or shared-expert MLP matrices,
the routed experts' matrices, the router, and the rest (norms, biases, sinks). Serving memory
divides the two parts of a layer over its GPUs (meshplan.serving.cost.memory); `model show`
reports the whole checkpoint.
"""

from __future__ import annotations

from meshplan.model import counts
from meshplan.model.quant import WeightPrecision
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec, MoEMLP

EMBEDDING_BITS = 16
"""The token embedding and the LM head stay 16-bit under every quantization method read."""


def layer_weight_bits(layer: LayerSpec, model: ModelSpec, precision: WeightPrecision) -> tuple[float, float]:
    """(bits of the layer's weights outside the routed experts, bits of its routed experts)."""
    lp, h, fmt = counts.layer_params(layer, model), model.hidden_size, precision.format
    attn = counts.attention_matmul_params(layer.attention, h)
    mlp = layer.mlp
    dense_mlps = [mlp] if isinstance(mlp, DenseMLP) else [mlp.shared] if mlp.shared else []
    matmul = sum(counts.mlp_matmul_params(m, h) for m in dense_mlps)
    rest = lp.total - lp.routed_experts - lp.router - attn - matmul
    dense = (attn * fmt("attention").bits + matmul * fmt("mlp").bits + lp.router * fmt("router").bits
             + rest * fmt("other").bits)
    routed = 0.0
    if isinstance(mlp, MoEMLP):
        routed_matmul = mlp.num_experts * counts.mlp_matmul_params(mlp.expert, h)
        routed = routed_matmul * fmt("experts").bits + (lp.routed_experts - routed_matmul) * fmt("other").bits
    return dense, routed


def checkpoint_bytes(model: ModelSpec, precision: WeightPrecision) -> float:
    """Bytes of the causal LM's weights stored in `precision` (MTP modules not included)."""
    bits = sum(sum(layer_weight_bits(layer, model, precision)) for layer in model.layers)
    bits += counts.final_norm_params(model) * precision.format("other").bits
    bits += (model.params_embedding + model.params_lm_head) * EMBEDDING_BITS
    return bits / 8
