"""The weight precision a serving plan runs: per module group, stored bits and GEMM dtype.

A plan's `weights_dtype` set to a dtype (a user's flag, a record's published precision) puts
every decoder weight in that dtype, as before checkpoints were read. `auto` takes the
checkpoint's `quantization_config` (meshplan.model.quant): gpt-oss keeps attention and routers
in bf16 and its experts in MXFP4; DeepSeek-V3/R1 hold block-scaled fp8 linears. A checkpoint
without one is served in 16 bits.
"""

from __future__ import annotations

from meshplan.model.quant import (
    BF16, FP16, WeightFormat, WeightPrecision, headline_dtype, uniform, with_sixteen,
)
from meshplan.model.spec import ModelSpec
from meshplan.serving.plan import ServingPlan

LOW_PRECISION_MATH = ("fp8", "int8", "fp4")
"""Dtypes a flag's weights also quantize the activations to (W8A8, W4A4); int4 is weight-only."""


def weight_bits(dtype: str) -> float:
    """Stored bits per quantized weight, including block scales (fp4: NVFP4's fp8 scale per 16
    values; int4: a 16-bit scale per group of 128)."""
    return {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4.125, "fp4": 4.5}[dtype]


def flag_format(dtype: str) -> WeightFormat:
    """A weights dtype stated by a flag or a record, as a format."""
    return WeightFormat(name=dtype, dtype=dtype, bits=float(weight_bits(dtype)),
                        activations=dtype if dtype in LOW_PRECISION_MATH else None)


def plan_precision(model: ModelSpec, plan: ServingPlan) -> WeightPrecision:
    """Per-group weight precision of `plan` serving `model`: the plan's dtype when it states one,
    else the checkpoint's (16-bit groups in bf16), else bf16 throughout."""
    if plan.weights_dtype != "auto":
        return uniform(flag_format(plan.weights_dtype))
    if model.weights is None:
        return uniform(BF16, "none")
    return with_sixteen(model.weights, BF16)


def weights_dtype(model: ModelSpec, plan: ServingPlan) -> str:
    """The headline weight dtype served (what `auto` resolves to; the plan's otherwise)."""
    return headline_dtype(model.weights, plan.weights_dtype)


def gemm_dtype(fmt: WeightFormat, gpu_dtypes: dict | tuple, sixteen: str = "bf16") -> str:
    """Compute dtype of a GEMM over `fmt` weights: W8A8 fp8/int8 and W4A4 fp4 where the GPU
    has the peak (W4A4 on a GPU with fp8 but no fp4 runs as fp8), else 16-bit: weight-only
    formats dequantize into bf16/fp16 GEMMs."""
    want = fmt.activations
    if want in LOW_PRECISION_MATH and want in gpu_dtypes:
        return want
    if want == "fp4" and "fp8" in gpu_dtypes:
        return "fp8"
    return sixteen


def sixteen_bit(plan: ServingPlan) -> str:
    """The activation dtype of 16-bit math (fp16 for an fp16 plan, else bf16)."""
    return "fp16" if plan.weights_dtype == "fp16" else "bf16"


__all__ = ["BF16", "FP16", "flag_format", "gemm_dtype", "plan_precision", "sixteen_bit",
           "weight_bits", "weights_dtype"]
