"""Kernel rates of today's serving engines, from published kernel benchmarks.

`serving/data/kernel_rates.yaml` holds the measured figures with their sources (DeepGEMM's FP8
dense and grouped GEMM tables, FlashMLA's decode rates, DeepEP's dispatch/combine bandwidths).
This module turns them into the constants the iteration cost model uses, so each constant can
be traced to a table and re-derived by a test:

- the grouped-GEMM efficiency of MoE experts (grouped rate / dense rate at the same per-expert
  shape, both measured against the shared GEMM shape model of meshplan.costs.ops);
- the fraction of HBM bandwidth a memory-bound decode attention kernel reaches;
- the bytes per element of an expert-parallel dispatch (FP8 with per-128 scales) and combine.
"""

from __future__ import annotations

import functools
import statistics
from importlib import resources

from meshplan.costs.constants import constants_for
from meshplan.costs.ops import wave_efficiency
from meshplan.hardware.catalog import get_gpu
from meshplan.yamlread import load_packaged

FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""Bytes per hidden element of an FP8 dispatch: one e4m3 byte plus an fp32 scale per 128 values
(DeepEP's and DeepGEMM's 1x128 activation blocks)."""
COMBINE_BYTES = 2.0
"""Bytes per hidden element of a combine: expert outputs return in BF16 (DeepEP's tables)."""
FP8_DISPATCH_ENGINES = ("sglang",)
"""Engines whose expert-parallel all-to-all quantizes tokens to FP8 before dispatch when the
experts compute in FP8/FP4: SGLang's wide-EP path (DeepEP, FP8 dispatch and BF16 combine as in
DeepEP's tables). vLLM's default all-to-all backend moves the 16-bit activations. TensorRT-LLM
stays at 16 bits: its fitted constants were fitted with a 16-bit all-to-all, and pricing its
dispatch in FP8 without a refit moves its Qwen3-235B records 4-10 points further from their
measurements."""


@functools.cache
def rates() -> dict:
    """The packaged kernel_rates.yaml (read once)."""
    path = resources.files("meshplan.serving").joinpath("data").joinpath("kernel_rates.yaml")
    return load_packaged(path.read_text())


def _rows(table: dict) -> list[dict]:
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


def _model_tflops(gpu_name: str, m: int, n: int, k: int, groups: int = 1) -> float:
    """Compute-bound FP8 rate of the shared GEMM shape model (meshplan.costs.ops.gemm_time's
    compute term) for `groups` GEMMs of (m x k) @ (k x n) on one GPU, in TFLOPS."""
    gpu = get_gpu(gpu_name)
    c = constants_for(gpu)
    small = min(m, n, k)
    eff = c.fp8_gemm_efficiency * small / (small + c.gemm_half_dim) * wave_efficiency(groups * m, n, gpu.sm_count)
    return gpu.peak_flops("fp8") * eff / 1e12


def _measured_over_model(rows: list[dict], gpu: str, m_key: str) -> float:
    return statistics.median(r["tflops"] / _model_tflops(gpu, r[m_key], r["n"], r["k"], r.get("groups", 1))
                             for r in rows)


@functools.cache
def grouped_gemm_efficiency() -> float:
    """MoE grouped GEMMs' rate as a fraction of dense GEMMs' at the same per-expert shape: the
    median of DeepGEMM's grouped rates (contiguous and masked layouts, 256-8192 tokens per
    expert) over the shape model, divided by the same median of its compute-bound dense rates
    (M = 4096; the M = 64/128 rows are weight-bandwidth bound). Both sides divide by one model,
    so what remains is what grouping costs (per-expert tiles, scheduling, the mask)."""
    data = rates()
    grouped, dense = data["fp8_grouped_gemm"], data["fp8_dense_gemm"]
    big = [r for r in _rows(dense) if r["m"] >= 1024]
    return (_measured_over_model(_rows(grouped), grouped["gpu"], "m_per_group")
            / _measured_over_model(big, dense["gpu"], "m"))


@functools.cache
def block_scaled_fp8_over_model() -> float:
    """DeepGEMM's compute-bound dense FP8 GEMMs (1x128 activation and 128x128 weight blocks, the
    layout of DeepSeek-V3/R1 checkpoints, M = 4096) over the shape model's fp8 rate (fitted on
    per-tensor fp8 matmuls): the median is about 1, so block-scaled fp8 checkpoints are priced at
    the same fp8 rate as per-tensor ones, with no efficiency factor of their own."""
    dense = rates()["fp8_dense_gemm"]
    return _measured_over_model([r for r in _rows(dense) if r["m"] >= 1024], dense["gpu"], "m")


@functools.cache
def decode_attention_bandwidth_fraction() -> float:
    """Fraction of HBM bandwidth a paged decode-attention kernel reaches when memory bound:
    FlashMLA's 3000 GB/s on an H800 (3.35 TB/s)."""
    mla = rates()["mla_decode"]
    return mla["memory_bound_gb_per_s"] * 1e9 / get_gpu(mla["gpu"]).hbm_bandwidth_bytes_per_s


def dispatch_bytes_per_element(engine: str, compute_dtype: str) -> float:
    """Bytes per hidden element one routed token carries to its expert's rank: FP8 plus scales
    where the engine quantizes before dispatch and the experts compute in FP8/FP4, else 16 bits."""
    if engine in FP8_DISPATCH_ENGINES and compute_dtype in ("fp8", "fp4"):
        return FP8_DISPATCH_BYTES
    return 2.0
