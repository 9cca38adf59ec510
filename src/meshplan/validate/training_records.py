"""Turn a training run record into the (model, cluster, plan) meshplan predicts from."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.hardware import Cluster
from meshplan.model import counts
from meshplan.model.spec import ModelSpec
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.resolve import balanced_split
from meshplan.validate.provenance import source_year
from meshplan.validate.records import record_model
from meshplan.validate.schema import Record

PRECISIONS = {"mxfp8": "fp8", "nvfp4": "fp4"}
"""Block-scaled formats by the GEMM precision they run: MXFP8 as fp8, NVFP4 as fp4."""

RECOMPUTE_FLOPS_RATIO = 1.2
"""Reported FLOPs at least this far above the model's: the run counted a recomputed forward
(full recompute reports 4 passes for 3, a ratio of 4/3; model-FLOPs accounting gives <= 1)."""


def recompute_from_reported_flops(record: Record, spec: ModelSpec) -> str | None:
    """`full` when a record leaves recompute open but its reported TFLOP/s per GPU exceed the
    model FLOPs at its measured speed (tokens/s, or the step time) by 4/3 (Megatron's
    hardware-FLOPs formula, 96 B s l h^2, counts the recomputed forward); otherwise None. The
    ratio is a property of the accounting: the measured speed cancels out. Model FLOPs are
    counted without the causal mask (the upper bound every published convention stays under)."""
    m, t = record.measured, record.training
    tokens = m.tokens_per_s_per_gpu
    if not tokens and m.step_time_s and t.global_batch_size:
        tokens = t.global_batch_size * t.seq_length / (m.step_time_s * record.hardware.num_gpus)
    if not (m.tflops_per_gpu_reported and tokens):
        return None
    train_flops = 3.0 * counts.forward_flops_per_token(spec, t.seq_length, causal=False)
    ratio = m.tflops_per_gpu_reported * 1e12 / (tokens * train_flops)
    return "full" if ratio >= RECOMPUTE_FLOPS_RATIO else None


FUSED_KERNELS_YEAR = 2023
"""FlashAttention reached Megatron-LM in January 2023 (NVIDIA/Megatron-LM pull request 267,
opened December 2022) and Transformer Engine's comm-GEMM overlap (--tp-comm-overlap) later
that year. Megatron-family runs published before then computed attention unfused (score
GEMM, fused mask-softmax, dropout and value GEMM through HBM) and exposed their
tensor-parallel collectives."""
LEGACY_FRAMEWORKS = ("megatron", "deepspeed", "nemo")


def legacy_megatron(record: Record) -> bool:
    """A Megatron-family record whose source predates fused attention (see FUSED_KERNELS_YEAR)."""
    year = source_year(record.source)
    return record.training.framework in LEGACY_FRAMEWORKS and year is not None and year < FUSED_KERNELS_YEAR


@dataclass(frozen=True, slots=True)
class TrainingCase:
    """Everything meshplan needs to predict one training record."""

    record: Record
    model: ModelSpec
    cluster: Cluster
    plan: TrainingPlan
    open_layout: bool
    """The record publishes neither tp nor pp: meshplan picks them."""


def training_case(record: Record) -> TrainingCase:
    """The model, cluster and plan a training record describes (unpublished fields left open;
    a pipeline that does not divide the layers gets the balanced split frameworks use)."""
    t = record.training
    assert t is not None
    spec = record_model(record)
    cluster = Cluster.build(**record.hardware.model_dump())
    chunks = (t.pp or 1) * (t.vpp or 1)
    split = None if spec.num_layers % chunks == 0 else balanced_split(spec.num_layers, chunks)
    legacy = legacy_megatron(record)
    plan = TrainingPlan(
        tp=t.tp or 1, pp=t.pp or 1, vpp=t.vpp, dp=t.dp, cp=t.cp or 1, ep=t.ep or 1, etp=t.etp,
        sequence_parallel=t.sequence_parallel, dp_sharding=t.dp_sharding,
        micro_batch_size=t.micro_batch_size, global_batch_size=t.global_batch_size,
        seq_len=t.seq_length,
        recompute=t.recompute or recompute_from_reported_flops(record, spec) or "none",
        precision=PRECISIONS.get(t.precision or "bf16", t.precision or "bf16"),
        pipeline_split=split, framework=t.framework,
        capacity_factor=1.0 if t.moe_token_dispatch in ("capacity", "forced_balance") else None,
        attention=t.attention or ("eager" if legacy else None),
        implementation=t.implementation,
        tp_comm_overlap=False if legacy else None,
        moe_dispatcher=t.moe_dispatcher, moe_a2a_overlap=t.moe_a2a_overlap,
    )
    return TrainingCase(record, spec, cluster, plan, open_layout=t.tp is None and t.pp is None)
