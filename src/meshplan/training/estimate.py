"""One training plan -> StepEstimate: step time and its breakdown, throughput, MFU, memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.finetune import adapters as finetune
from meshplan.training.time.constants import TrainingConstants
from meshplan.training.time.context import CostContext, cost_context
from meshplan.model.counts import matmul_flops_per_token
from meshplan.training.imbalance.report import imbalance_report
from meshplan.training.imbalance.packing import doc_imbalance
from meshplan.training.memory.total import MemoryEstimate, estimate_memory
from meshplan.training.plan import QUANTIZED
from meshplan.training.pipeline.simulate import (
    PipelineResult, StageTimes, simulate_pipeline, step_lower_bound,
)
from meshplan.training.layout.resolve import ResolvedPlan
from meshplan.training.memory.states import stage_signatures
from meshplan.training.time.step import (ChunkTime, chunk_times, dp_seconds, optimizer_seconds,
                                          p2p_seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEstimate:
    """Predicted behaviour of one optimizer step."""

    plan: ResolvedPlan
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs (3 x causal forward FLOPs per token, no recompute; LoRA/QLoRA: see
    `finetune.step_flops_per_token`) / (step x GPUs x dense peak)."""
    hfu: float
    """Hardware FLOPs utilisation: model FLOPs plus recomputed forward work."""
    breakdown: dict[str, float]
    """Seconds on the critical stage: compute, exposed communication by kind, bubble, optimizer."""
    pipeline: PipelineResult
    memory: MemoryEstimate | None
    """Per-stage memory (None when estimated without it, e.g. while calibrating)."""
    chunks: tuple[ChunkTime, ...] = field(repr=False)
    imbalance: dict[str, dict] = field(default_factory=dict)
    """Document attention and MoE routing imbalance (training/imbalance/report.py); empty by
    default."""

    @property
    def bubble_fraction(self) -> float:
        """The pipeline bubble, the one definition every view prints: the idle time of the
        busiest pipeline stage during the step (`breakdown["pipeline_bubble"]`) as a share of the
        whole step time, so it adds up with the breakdown's other parts to 100%. (The
        simulator's `pipeline.bubble_fraction`, idle time averaged over stages as a share of
        the pipelined part only, is a property of the schedule and is not shown.)"""
        if self.step_time_s <= 0:
            return 0.0
        return self.breakdown.get("pipeline_bubble", 0.0) / self.step_time_s


def _stage_times(ctx: CostContext, chunks: list[ChunkTime]) -> list[StageTimes]:
    """Each stage's StageTimes; stages of one signature run the same chunks, so they share one
    (built and checked once per plan rather than once per stage)."""
    pp = ctx.plan.pp
    out: list[StageTimes] = []
    for s, sig in enumerate(stage_signatures(ctx.model, ctx.plan)):
        if sig != s:
            out.append(out[sig])
            continue
        mine = chunks[s::pp]
        out.append(StageTimes(forward_s=tuple(c.forward_s for c in mine),
                              backward_s=tuple(c.backward_s for c in mine),
                              weight_grad_s=tuple(c.weight_grad_s for c in mine)))
    return out


def _dp_and_optimizer(ctx: CostContext, chunks: list[ChunkTime]) -> tuple[float, float, float]:
    """(dp total, dp exposed, optimizer) of the slowest stage (each stage signature once)."""
    worst = (0.0, 0.0, 0.0)
    p = ctx.plan
    seen: set = set()
    for s, sig in enumerate(stage_signatures(ctx.model, p)):
        if sig in seen:
            continue
        seen.add(sig)
        backward = sum(c.backward_s for c in chunks[s::p.pp])
        window = backward * (p.num_microbatches if p.dp_sharding == "full" else 1)
        total, exposed = dp_seconds(ctx, s, window)
        opt = optimizer_seconds(ctx, s, backward)
        if exposed + opt > worst[1] + worst[2]:
            worst = (total, exposed, opt)
    return worst


def _flops(model: ModelSpec, plan: ResolvedPlan) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step over all GPUs."""
    tokens = plan.global_batch_size * plan.seq_len
    if finetune.is_finetune(plan):
        return tuple(f * tokens for f in finetune.step_flops_per_token(model, plan))
    forward = model.flops_per_token_forward(plan.seq_len, causal=True) * tokens
    docs = doc_imbalance(plan)
    if docs is not None:  # only the document-masked share of the causal attention is work
        attention = forward - matmul_flops_per_token(model) * tokens
        forward -= attention * (1.0 - docs.masked_share)
    extra = {"full": 1.0, "selective": 0.0, "none": 0.0}[plan.recompute] * forward
    return 3 * forward, 3 * forward + extra


def _breakdown(ctx: CostContext, chunks, pipe: PipelineResult, dp, opt) -> dict[str, float]:
    p = ctx.plan
    m = p.num_microbatches
    stage = max(range(p.pp), key=lambda s: pipe.busy_s[s])
    mine = chunks[stage::p.pp]
    tp = m * sum(c.tp_exposed_s for c in mine)
    ep = m * sum(c.ep_s for c in mine)
    cp = m * sum(c.cp_exposed_s for c in mine)
    fsdp = m * sum(c.fsdp_exposed_s for c in mine)
    offload = m * sum(c.offload_exposed_s for c in mine)
    compute = pipe.busy_s[stage] - tp - ep - cp - fsdp - offload
    return {"compute": compute, "tp_comm_exposed": tp, "ep_comm": ep, "cp_comm_exposed": cp,
            "fsdp_gather_exposed": fsdp, "offload_copies_exposed": offload,
            "pipeline_bubble": pipe.step_time_s - pipe.busy_s[stage],
            "dp_comm_exposed": dp, "optimizer": 0.0 if p.offload_optimizer else opt,
            "cpu_offload": opt if p.offload_optimizer else 0.0, "other": ctx.k.step_overhead_s}


@dataclass(frozen=True, slots=True)
class StepParts:
    """Everything of a step estimate but the pipeline simulation: what a search needs to bound
    a plan's step time before deciding to simulate it."""

    ctx: CostContext
    chunks: list[ChunkTime]
    stages: list[StageTimes]
    p2p_s: float
    dp_exposed_s: float
    optimizer_s: float

    def lower_bound_s(self) -> float:
        """A lower bound on the step time `estimate_from_parts` returns (see step_lower_bound)."""
        p = self.ctx.plan
        pipe = step_lower_bound(p.schedule, self.stages, p.num_microbatches, self.p2p_s)
        return pipe + self.dp_exposed_s + self.optimizer_s + self.ctx.k.step_overhead_s


def step_parts(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
               constants: TrainingConstants | None = None) -> StepParts:
    """Chunk times, stage times, p2p, exposed DP and optimizer time of `plan`."""
    ctx = cost_context(model, plan, cluster, constants)
    chunks = chunk_times(ctx)
    _, dp_exposed, opt = _dp_and_optimizer(ctx, chunks)
    return StepParts(ctx, chunks, _stage_times(ctx, chunks), p2p_seconds(ctx), dp_exposed, opt)


def estimate_from_parts(parts: StepParts, with_events: bool = False,
                        with_memory: bool = True) -> StepEstimate:
    """Simulate the pipeline of `parts` and assemble the StepEstimate."""
    ctx, plan = parts.ctx, parts.ctx.plan
    model, cluster = ctx.model, ctx.cluster
    pipe = simulate_pipeline(plan.schedule, parts.stages, plan.num_microbatches, parts.p2p_s,
                             with_events=with_events)
    dp_exposed, opt = parts.dp_exposed_s, parts.optimizer_s
    step = pipe.step_time_s + dp_exposed + opt + ctx.k.step_overhead_s
    model_flops, hw_flops = _flops(model, plan)
    peak = cluster.gpu.peak_flops("bf16" if ctx.gemm_dtype in QUANTIZED else ctx.gemm_dtype)
    gpus = cluster.num_gpus
    return StepEstimate(
        plan=plan, step_time_s=step,
        tokens_per_s_per_gpu=plan.global_batch_size * plan.seq_len / step / gpus,
        mfu=model_flops / (step * gpus * peak), hfu=hw_flops / (step * gpus * peak),
        breakdown=_breakdown(ctx, parts.chunks, pipe, dp_exposed, opt), pipeline=pipe,
        memory=estimate_memory(model, cluster, plan) if with_memory else None,
        chunks=tuple(parts.chunks), imbalance=imbalance_report(model, plan),
    )


def estimate_step(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
                  with_events: bool = False, constants: TrainingConstants | None = None,
                  with_memory: bool = True) -> StepEstimate:
    """Predict one optimizer step of `plan` for `model` on `cluster`."""
    return estimate_from_parts(step_parts(model, cluster, plan, constants), with_events,
                               with_memory)
