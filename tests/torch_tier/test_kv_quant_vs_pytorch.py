"""The 4-/2-bit KV bytes of meshplan.serving.cost.kvquant against a reference KIVI-style quantizer in
PyTorch: keys quantized per channel (groups of G tokens), values per token (groups of G
channels), asymmetric with an fp16 scale and zero point per group, codes packed into uint8.
The reference is first checked to reconstruct the cache within half a quantization step, so
the bytes counted are those of a working quantized cache. Tolerance: exact (whole tensors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from meshplan.serving.cost.kvquant import GROUP_SIZE, kv_element_bytes  # noqa: E402


def _quantize(x, bits, dim):
    """(packed codes, scale, zero, dequantized) of `x` in groups of GROUP_SIZE along `dim`."""
    g = x.movedim(dim, -1).unflatten(-1, (-1, GROUP_SIZE)).float()
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    levels = 2 ** bits - 1
    scale = ((hi - lo) / levels).clamp_min(1e-8)
    codes = torch.round((g - lo) / scale).clamp(0, levels).to(torch.uint8)
    per_byte = 8 // bits
    flat = codes.flatten(-2).unflatten(-1, (-1, per_byte))
    packed = sum(flat[..., i] << (bits * i) for i in range(per_byte)).to(torch.uint8)
    deq = (codes.float() * scale + lo).flatten(-2).movedim(-1, dim)
    return packed, scale.half(), lo.half(), deq, scale


@pytest.mark.parametrize("dtype, bits", [("int4", 4), ("int2", 2)])
def test_quantized_cache_bytes(dtype, bits):
    torch.manual_seed(0)
    tokens, heads, dim = 4 * GROUP_SIZE, 8, 128
    k = torch.randn(tokens, heads, dim, dtype=torch.bfloat16)
    v = torch.randn(tokens, heads, dim, dtype=torch.bfloat16)
    stored = 0
    for x, dim_ in ((k, 0), (v, 2)):  # keys per channel (groups over tokens), values per token
        packed, scale, zero, deq, step = _quantize(x, bits, dim_)
        step_full = step.expand(*step.shape[:-1], GROUP_SIZE).flatten(-2).movedim(-1, dim_)
        assert ((deq - x.float()).abs() <= step_full / 2 + 1e-3).all()
        stored += packed.nbytes + scale.nbytes + zero.nbytes
    elements = 2 * tokens * heads * dim
    assert stored == elements * kv_element_bytes(dtype)
