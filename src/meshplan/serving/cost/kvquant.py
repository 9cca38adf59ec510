"""4-bit and 2-bit KV cache in the manner of KIVI (Liu et al., arXiv 2402.02750): keys quantized
per channel and values per token, in groups of G elements, each group with a 16-bit scale and
a 16-bit zero point; the R most recent tokens of each request stay in 16 bits until a whole
group of them can be quantized.

What it changes in the serving model: the bytes one cached token occupies (fewer blocks' worth
of memory, less to read in decode attention), a per-request 16-bit residual, and the
dequantisation arithmetic a fused decode-attention kernel does on every element it reads.
None of vLLM, SGLang or TensorRT-LLM ships such a KV cache (their low-precision KV caches are
fp8, fp4 or int8), so a plan asks for it explicitly (`ServingPlan.what_if`).
"""

from __future__ import annotations

from meshplan.hardware import GPUSpec
from meshplan.model import counts

QUANTIZED_KV = {"int4": 4, "int2": 2}
"""Sub-byte KV dtypes and their stored bits per element."""

GROUP_SIZE = 32
"""Elements sharing one scale and zero point (KIVI's experiments use G = 32)."""

RESIDUAL_TOKENS = 128
"""Most recent tokens per request kept in 16 bits (KIVI's residual length R = 128)."""

SCALE_BITS = 2 * 16
"""One fp16 scale and one fp16 zero point per group."""

DEQUANT_OPS_PER_ELEMENT = 4
"""Vector-unit operations to turn one stored element back into 16 bits: unpack (shift and mask),
convert to float, and one fused multiply-add with the group's scale and zero point (2 FLOPs).
Assumption (a count of the kernel's work, not a measurement)."""


def kv_element_bytes(dtype: str) -> float:
    """Bytes one cached element takes: the dtype's width, plus for int4/int2 the group's scale
    and zero point spread over its G elements (int4: 4 + 32/32 = 5 bits)."""
    bits = QUANTIZED_KV.get(dtype)
    if bits is None:
        return counts.bytes_per_element(dtype)
    return (bits + SCALE_BITS / GROUP_SIZE) / 8


def residual_bytes_per_request(elements_per_token: float, dtype: str) -> float:
    """Extra bytes of a request's 16-bit residual: R tokens held at 2 bytes per element rather
    than the quantized width already counted per token (0 for other dtypes)."""
    if dtype not in QUANTIZED_KV:
        return 0.0
    return RESIDUAL_TOKENS * elements_per_token * (2.0 - kv_element_bytes(dtype))


def dequant_s_per_byte(dtype: str, gpu: GPUSpec) -> float:
    """Seconds of dequantisation per KV byte read in decode attention, at the GPU's fp32 vector
    rate (the CUDA cores, not the tensor cores); 0 for dtypes read as they are."""
    if dtype not in QUANTIZED_KV:
        return 0.0
    rate = gpu.peak_flops("fp32")
    return DEQUANT_OPS_PER_ELEMENT / kv_element_bytes(dtype) / rate
