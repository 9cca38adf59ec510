"""Time of one operator on one GPU: GEMMs, fused attention, memory-bound kernels.

Every op is (FLOPs, bytes moved, dtype). A GEMM's time is the larger of its compute time at a
shape-dependent fraction of the dense peak (wave quantisation over the SMs and small-dimension
inefficiency) and its memory time at achievable HBM bandwidth, plus a launch overhead. The
constants live in `ComputeConstants` (fitted per GPU family, bounded by microbenchmarks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.hardware import GPUSpec

TILE_M, TILE_N = 128, 256
"""Output tile of a large tensor-core GEMM kernel (CUTLASS/cuBLAS Hopper default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeConstants:
    """Efficiency constants of one GPU family (see costs/data/compute_constants.yaml)."""

    gemm_efficiency: float
    """Fraction of dense peak the largest GEMMs reach (bounded by measured maximum matmul FLOPS)."""
    fp8_gemm_efficiency: float
    """The same for fp8 GEMMs (their best measured fraction of the fp8 peak is lower)."""
    gemm_half_dim: float
    """A GEMM dimension at which small-dimension efficiency is halved (skinny GEMMs)."""
    attention_efficiency: float
    """Fraction of dense peak FlashAttention-2 (PyTorch SDPA's flash backend) reaches forward."""
    fused_attention_efficiency: float
    """The same for the vendor-tuned kernels Transformer Engine uses (cuDNN fused attention,
    FlashAttention-3 class on Hopper and later)."""
    attention_backward_ratio: float
    """Backward attention time / forward time at equal FLOP count efficiency (FlashAttention: 2.5x FLOPs)."""
    hbm_efficiency: float
    """Achievable fraction of HBM bandwidth for memory-bound kernels."""
    launch_s: float
    """Fixed time per kernel (launch, tail, synchronisation)."""


POWER_CLOCK_EXPONENT = 0.38
"""Sustained tensor throughput ~ (power limit / TDP)^POWER_CLOCK_EXPONENT below TDP. Dynamic power
~ C V^2 f with the voltage rising with the clock gives f^3, an exponent of 1/3; NVIDIA's own
data sheets measure it on one die sold at two power envelopes (hardware/data/gpus.yaml): B200 at
1000 W (HGX, 2.25 PF dense BF16 over 148 SMs) vs 1200 W (GB200, 2.5 PF over 152 SMs), and B300 at
1100 W (HGX, 2.25 PF, 148 SMs) vs 1400 W (GB300, 2.5 PF, 152 SMs): a per-SM rate ratio of 0.924
at power ratios 0.833 and 0.786, exponents ln 0.924 / ln 0.833 = 0.43 and ln 0.924 / ln 0.786 =
0.33; their mean."""


def clock_factor(gpu: GPUSpec, power_limit_w: float | None) -> float:
    """Sustained-clock fraction under a power cap, (P / TDP)^POWER_CLOCK_EXPONENT, applied to the
    compute-bound part only; 1 at or above TDP."""
    if not power_limit_w or power_limit_w >= gpu.tdp_w:
        return 1.0
    return (power_limit_w / gpu.tdp_w) ** POWER_CLOCK_EXPONENT


def wave_efficiency(m: int, n: int, sms: int) -> float:
    """Useful fraction of the output-tile waves over the GPU's SMs. Fewer tiles than SMs are
    spread by split-K / stream-K kernels, so only multi-wave GEMMs lose their last wave's idle
    SMs; small dimensions are charged by the shape term instead."""
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    if tiles <= sms:
        return 1.0
    waves = math.ceil(tiles / sms)
    return tiles / (waves * sms)


SPLIT_K_MIN = 512
"""Smallest reduction length one split-K slice gets: below it the partial-sum traffic and the
extra reduction kernel outweigh the SMs it fills (cuBLAS's and CUTLASS's split-K / stream-K
heuristics split K only for long reductions; a 128-wide tile's main loop needs a few k-steps
of 64-128 to hide its pipeline fill)."""


def small_gemm_waves(m: int, n: int, k: int, sms: int) -> float:
    """Useful fraction of the SMs for a GEMM of fewer output tiles than SMs: the kernel is one
    wave whatever its size, so it takes one tile's main loop at the per-SM rate (the latency
    floor of a small GEMM); split-K cuts K into up to sms // tiles slices of at least
    SPLIT_K_MIN to fill more SMs. Multi-wave GEMMs as `wave_efficiency`."""
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    if tiles > sms:
        return tiles / (math.ceil(tiles / sms) * sms)
    splits = max(1, min(sms // tiles, k // SPLIT_K_MIN))
    return tiles * splits / sms


LOW_PRECISION = ("fp8", "int8", "fp4")
"""Compute dtypes whose GEMMs reach `fp8_gemm_efficiency` of their peak, not `gemm_efficiency`."""


def gemm_time(m: float, n: float, k: float, *, gpu: GPUSpec, dtype: str, c: ComputeConstants,
              clock: float = 1.0, count: int = 1, weight_width: float | None = None,
              roofline_order: float | None = None, tile_waves: bool = False) -> float:
    """Seconds for `count` GEMMs of (m x k) @ (k x n) computed in `dtype`
    (bf16/fp16/fp8/int8/fp4/fp32). `weight_width` is the stored bytes per element of the
    (k x n) weight when it differs from the compute dtype (weight-only quantization).
    `tile_waves` prices GEMMs of fewer tiles than SMs as one wave (`small_gemm_waves`) instead
    of assuming split-K / stream-K fills every SM (the training model uses it)."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    small = min(m, n, k)
    shape = small / (small + c.gemm_half_dim)
    best = c.fp8_gemm_efficiency if dtype in LOW_PRECISION else c.gemm_efficiency
    if tile_waves:
        waves = small_gemm_waves(int(m), int(n), int(k), gpu.sm_count)
    else:
        waves = wave_efficiency(int(m), int(n), gpu.sm_count)
    eff = best * shape * waves
    compute = flops / (gpu.peak_flops(dtype) * clock * eff)
    width = {"fp8": 1.0, "int8": 1.0, "fp4": 0.5, "fp32": 4.0}.get(dtype, 2.0)
    weights = k * n * (width if weight_width is None else weight_width)
    memory = (width * (m * k + m * n) + weights) / (gpu.hbm_bandwidth_bytes_per_s * c.hbm_efficiency)
    if roofline_order:
        body = (compute ** roofline_order + memory ** roofline_order) ** (1 / roofline_order)
    else:
        body = max(compute, memory)
    return count * (body + c.launch_s)


def attention_flops(q_tokens: float, kv_tokens: float, heads: int, qk_dim: int, v_dim: int,
                    causal: bool) -> float:
    """Forward FLOPs of scores and weighted values for `q_tokens` queries over `kv_tokens` keys."""
    pairs = q_tokens * kv_tokens * (0.5 if causal else 1.0)
    return 2.0 * pairs * heads * (qk_dim + v_dim)


def attention_time(flops_forward: float, *, gpu: GPUSpec, dtype: str, c: ComputeConstants,
                   clock: float = 1.0, backward: bool = False, vendor_kernel: bool = False) -> float:
    """Seconds for fused attention forward (or its backward) with FlashAttention-2 or, with
    `vendor_kernel`, the cuDNN / FlashAttention-3 class kernel."""
    if flops_forward <= 0:
        return 0.0
    eff = c.fused_attention_efficiency if vendor_kernel else c.attention_efficiency
    rate = gpu.peak_flops("bf16" if dtype == "fp8" else dtype) * clock * eff
    factor = c.attention_backward_ratio if backward else 1.0
    return factor * flops_forward / rate + c.launch_s


def memory_time(bytes_moved: float, *, gpu: GPUSpec, c: ComputeConstants, kernels: int = 1) -> float:
    """Seconds for memory-bound kernels moving `bytes_moved` through HBM."""
    return bytes_moved / (gpu.hbm_bandwidth_bytes_per_s * c.hbm_efficiency) + kernels * c.launch_s
