"""HBM traffic of a decoder layer's memory-bound kernels when the trainer fuses them.

An eager PyTorch layer runs every norm, residual add, rotary and activation as its own kernel,
each reading its inputs from HBM and writing its output back (training/time/layer.py,
`_memory_bound`). A compiled (torch.compile / Inductor) or hand-fused (llm.c) layer fuses the
chains between GEMMs, so each fused kernel streams its inputs once and writes once:
- the residual add fuses with the norm that follows it: read the residual stream and the
  branch output, write the new residual and the normalised input of the next GEMM (2 + 2 per
  norm, where eager pays a norm's read and write plus the add's two reads and one write);
- rotary embeddings fuse into one pass over q and k (read and write), as eagerly;
- the MLP activation: Inductor runs bias + activation (x up, when gated) as one pointwise kernel
  over the GEMM output (read gate (and up), write the product); llm.c puts GELU in the cuBLASLt
  epilogue of the FC matmul and only writes the pre-activation it keeps for backward (one write).
Counts are elements per token of one layer's forward; backward streams about twice as much
(as for the eager layer).
"""

from __future__ import annotations

from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec

FUSED = ("compiled", "fused")
"""Implementations whose memory-bound kernels are fused (TrainingPlan.implementation)."""


def fused_elements_per_token(implementation: str, model: ModelSpec, layer: LayerSpec,
                             tp: int, sp: int) -> float:
    """HBM elements streamed per token by one layer's fused memory-bound forward kernels
    (MoE layers keep the eager count: their permutations are priced separately)."""
    h, a, mlp = model.hidden_size, layer.attention, layer.mlp
    norms = 2 * 4 * h / sp  # two residual + norm kernels, 2 reads and 2 writes each
    rotary = 0.0 if model.learned_position_embeddings else 2 * (a.num_heads + a.num_kv_heads) * a.head_dim / tp
    inter = mlp.intermediate_size / tp
    if implementation == "fused":
        activation = inter  # GELU in the matmul epilogue: the pre-activation written for backward
    else:
        activation = (3 if mlp.gated else 2) * inter
    return norms + rotary + activation


def fused_memory_applies(implementation: str, layer: LayerSpec) -> bool:
    """Whether `fused_elements_per_token` prices this layer (dense layers of a fused trainer)."""
    return implementation in FUSED and isinstance(layer.mlp, DenseMLP)
