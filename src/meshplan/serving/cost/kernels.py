"""Kernel rates of today's serving engines, from published kernel benchmarks.

`serving/data/kernel_rates.yaml` holds the measured figures with their sources (DeepGEMM's FP8
dense and grouped GEMM tables, FlashMLA's decode rates, DeepEP's dispatch/combine bandwidths).
This module turns them into the constants the iteration cost model uses, so each constant can
be traced to a table and re-derived by a test:

- the grouped-GEMM efficiency of MoE experts (grouped rate / dense rate at the same per-expert
  shape, both measured against the shared GEMM shape model of meshplan.costs.ops);
- the fraction of HBM bandwidth a memory-bound decode attention kernel reaches;
- the bytes per element of an expert-parallel dispatch (FP8 with per-128 scales) and combine;
- for a GPU with measured whole-GPU rates (the `gpu_*` tables: the AMD Instinct parts today), its
  GEMM ceilings, fused-attention rate and streaming bandwidth in place of its family's generic
  constants (`measured_constants`, `stream_fraction`).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import replace
from importlib import resources

from meshplan.costs.constants import constants_for
from meshplan.costs.ops import ComputeConstants, wave_efficiency
from meshplan.hardware import GPUSpec
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


MIN_LAUNCHES = 10
"""A measured GEMM sets a GPU's efficiency only if it ran for at least this many kernel launch
times: a shorter one measures the launch and the first wave's latency, not the math rate."""


def _gpu_rows(table: str, gpu_name: str) -> list[dict]:
    return [r for r in _rows(rates().get(table, {"columns": [], "rows": []})) if r["gpu"] == gpu_name]


def gemm_row_efficiency(gpu: GPUSpec, row: dict, c: ComputeConstants) -> float | None:
    """The GEMM ceiling (`best` of meshplan.costs.ops.gemm_time) at which the shared shape model,
    with its launch time, takes the measured time of `row`'s GEMM; None for a launch-bound row.
    A best-shape row fills every CU with whole tiles, so no wave quantization is charged."""
    m, n, k = row["m"], row["n"], row["k"]
    flops = 2.0 * m * n * k
    seconds = flops / (row["tflops"] * 1e12)
    if seconds < MIN_LAUNCHES * c.launch_s:
        return None
    small = min(m, n, k)
    waves = 1.0 if row["best"] else wave_efficiency(m, n, gpu.sm_count)
    shape = small / (small + c.gemm_half_dim) * waves
    return flops / (gpu.peak_flops(row["dtype"]) * shape * (seconds - c.launch_s))


def _implied(gpu_name: str, dtype: str, best: bool) -> list[float]:
    gpu = get_gpu(gpu_name)
    c = constants_for(gpu)
    rows = [r for r in _gpu_rows("gpu_gemm", gpu_name) if r["dtype"] == dtype and r["best"] == best]
    return [e for e in (gemm_row_efficiency(gpu, r, c) for r in rows) if e is not None]


@functools.cache
def typical_over_best() -> float:
    """How far ordinary shapes fall below a max-achievable search's best shape: the median of
    (median ceiling of a GPU's ordinary rows / that of its best-shape rows) over the GPU x dtype
    pairs measured both ways (MI300X FP8: Azure's shapes against AMD's MAF figure)."""
    ratios = []
    for gpu_name, dtype in {(r["gpu"], r["dtype"]) for r in _rows(rates()["gpu_gemm"])}:
        typical, best = _implied(gpu_name, dtype, False), _implied(gpu_name, dtype, True)
        if typical and best:
            ratios.append(statistics.median(typical) / statistics.median(best))
    return statistics.median(ratios)


@functools.cache
def measured_gemm_efficiency(gpu_name: str, dtype: str) -> float | None:
    """The GEMM ceiling of `dtype` on the GPU (None without a compute-bound row): the median
    over its ordinary measured shapes, as DeepGEMM's tables on the NVIDIA side; with only
    best-shape figures, their median x `typical_over_best` (a best shape alone would price
    every GEMM at the rate of the best one)."""
    typical = _implied(gpu_name, dtype, False)
    if typical:
        return statistics.median(typical)
    best = _implied(gpu_name, dtype, True)
    return statistics.median(best) * typical_over_best() if best else None


@functools.cache
def stream_fraction(gpu_name: str) -> float | None:
    """Fraction of the data-sheet HBM bandwidth a streaming kernel measured on the GPU (gpu_stream,
    BabelStream Copy), or None."""
    rows = _gpu_rows("gpu_stream", gpu_name)
    if not rows:
        return None
    best = max(r["copy_gb_per_s"] for r in rows) * 1e9
    return best / get_gpu(gpu_name).hbm_bandwidth_bytes_per_s


@functools.cache
def attention_fraction(gpu_name: str) -> float | None:
    """Measured fused-attention forward rate over the GPU's BF16 dense peak (gpu_attention_forward),
    or None."""
    rows = _gpu_rows("gpu_attention_forward", gpu_name)
    if not rows:
        return None
    return statistics.median(r["tflops"] for r in rows) * 1e12 / get_gpu(gpu_name).peak_flops("bf16")


def memory_bound_efficiency(gpu_name: str, efficiency: float) -> float:
    """An engine's memory-bound efficiency (weight streaming, paged KV reads) on this GPU: no
    kernel streams faster than the GPU's measured copy rate, so that caps it where measured."""
    measured = stream_fraction(gpu_name)
    return efficiency if measured is None else min(efficiency, measured)


def measured_constants(gpu: GPUSpec, c: ComputeConstants) -> ComputeConstants:
    """`c` with the GPU's measured rates in place of its family's constants where the gpu_*
    tables have them: the BF16 and FP8 GEMM ceilings, the fused-attention efficiency, and the
    HBM efficiency capped at the measured copy rate. Unchanged for a GPU without rows."""
    found = {"gemm_efficiency": measured_gemm_efficiency(gpu.name, "bf16"),
             "fp8_gemm_efficiency": measured_gemm_efficiency(gpu.name, "fp8"),
             "fused_attention_efficiency": attention_fraction(gpu.name),
             "hbm_efficiency": memory_bound_efficiency(gpu.name, c.hbm_efficiency)}
    return replace(c, **{name: value for name, value in found.items() if value is not None})
