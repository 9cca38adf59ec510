"""Everything the per-layer and per-step cost functions share for one plan."""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshplan.costs.comm import CommConstants, load_constants
from meshplan.costs.constants import constants_for, gpu_ceiling
from meshplan.costs.ops import (
    ComputeConstants,
    attention_time,
    clock_factor,
    gemm_time,
    memory_time,
)
from meshplan.hardware import Cluster, GPUSpec
from meshplan.memo import MISS, IdentityMemo
from meshplan.model.spec import ModelSpec
from meshplan.training.time.constants import TrainingConstants, training_constants
from meshplan.training.layout.groups import PlanGroups, plan_groups
from meshplan.calibration.site import active_site
from meshplan.training.time.kernels import profile_for
from meshplan.training.imbalance.packing import doc_imbalance
from meshplan.training.plan import QUANTIZED
from meshplan.training.layout.resolve import ResolvedPlan

VENDOR_ATTENTION = ("megatron", "nemo", "maxtext")
"""Frameworks whose attention runs Transformer Engine / XLA-tuned kernels rather than FA2."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CostContext:
    """A plan on a cluster, with the constants and placements its costs need."""

    model: ModelSpec
    plan: ResolvedPlan
    cluster: Cluster
    groups: PlanGroups
    c: ComputeConstants
    comm: CommConstants
    k: TrainingConstants
    clock: float
    tokens: float
    """Tokens of one micro-batch on one GPU's GEMMs: micro_batch_size x seq_len / cp."""
    act_width: float
    """Bytes per activation element (2, or 4 in fp32 training)."""
    gemm_dtype: str
    full_recompute_share: float
    """Share of each chunk's layers that full recompute re-runs."""
    kernel_profile: str = "pytorch-eager"
    """How the framework launches a layer's ops (training/time/kernels.py): its host floor."""
    attention_load: float = 1.0
    """Busiest rank's document-masked attention work over one full causal sequence per
    sequence (training/imbalance/packing.py); 1.0 without a document-length distribution."""

    def gemm(self, m: float, n: float, k: float) -> float:
        """Seconds for one GEMM of the plan's precision (scaled by the fitted compute scale)."""
        t = self._gemm(m, n, k, self.gemm_dtype)
        if self.gemm_dtype in QUANTIZED:
            # Casts and scales stream the bf16 inputs, so they are priced next to an fp8 GEMM of
            # the same shape (not as a share of the faster fp4 one), NVFP4's heavier recipe
            # counting fp4_cast_scale fp8 casts.
            casts = self.k.fp8_overhead * self._gemm(m, n, k, "fp8")
            t += casts * (self.k.fp4_cast_scale if self.gemm_dtype == "fp4" else 1.0)
        return t * self.k.compute_scale

    def _gemm(self, m: float, n: float, k: float, dtype: str) -> float:
        return gemm_time(m, n, k, gpu=self.cluster.gpu, dtype=dtype, c=self.c, clock=self.clock,
                         tile_waves=True)

    def attention(self, flops: float) -> float:
        """Seconds for fused attention forward doing `flops`."""
        dtype = "bf16" if self.gemm_dtype in QUANTIZED + ("bf16",) else self.gemm_dtype
        t = attention_time(flops, gpu=self.cluster.gpu, dtype=dtype, c=self.c, clock=self.clock,
                           vendor_kernel=self.plan.framework in VENDOR_ATTENTION)
        return t * self.k.compute_scale * self.k.attention_scale

    def memory(self, bytes_moved: float, kernels: int = 1) -> float:
        """Seconds for memory-bound kernels."""
        return memory_time(bytes_moved, gpu=self.cluster.gpu, c=self.c, kernels=kernels)


def _gemm_dtype(plan: ResolvedPlan, cluster: Cluster) -> str:
    if plan.precision == "fp32":
        return "tf32" if "tf32" in cluster.gpu.dtypes else "fp32"
    if plan.precision == "fp8" and "fp8" not in cluster.gpu.dtypes:
        return "bf16" if "bf16" in cluster.gpu.dtypes else "fp16"
    if plan.precision == "fp4":  # resolve_plan refused GPUs without fp4 tensor cores
        return "fp4"
    if plan.precision == "bf16" and "bf16" not in cluster.gpu.dtypes:
        return "fp16"  # V100: fp16 tensor cores
    return plan.precision


def _recompute_share(model: ModelSpec, plan: ResolvedPlan) -> float:
    if plan.recompute != "full" or plan.recompute_num_layers is None:
        return 1.0
    per_chunk = model.num_layers / (plan.pp * plan.vpp)
    return min(1.0, plan.recompute_num_layers / per_chunk)


def _bounded(k: TrainingConstants, c: ComputeConstants, gpu: GPUSpec) -> TrainingConstants:
    """Keep the fitted compute scale from pushing GEMMs past the measured matmul ceiling."""
    ceiling = gpu_ceiling(gpu, "gemm_efficiency")
    floor = c.gemm_efficiency / ceiling if ceiling else 0.0
    return replace(k, compute_scale=max(k.compute_scale, floor))


def _with_site(k: TrainingConstants, comm: CommConstants, gpu: str) -> tuple[TrainingConstants, CommConstants]:
    """The constants with the active site profile's multipliers (meshplan.calibration.site): kernel time
    for this GPU model, collective time inside and across nodes."""
    site = active_site()
    if site is None:
        return k, comm
    intra, inter = site.factor("training", "intra_network"), site.factor("training", "inter_network")
    k = replace(k, compute_scale=k.compute_scale * site.factor("training", "compute", gpu))
    comm = replace(comm, scale_up_efficiency=comm.scale_up_efficiency / intra,
                   nvls_allreduce_efficiency=comm.nvls_allreduce_efficiency / intra,
                   pcie_efficiency=comm.pcie_efficiency / intra,
                   scale_out_efficiency=comm.scale_out_efficiency / inter)
    return k, comm


_ENGINES = IdentityMemo(256)
"""(framework, id(gpu), id(site)) -> (gpu, site, constants): see `_engine`."""


def _engine(framework: str, gpu: GPUSpec, constants: TrainingConstants | None) -> tuple:
    """(compute, training, communication) constants of a framework on a GPU under the active
    site profile: the same for every plan of a search, so built once (explicit `constants`, as
    calibration passes, are bounded afresh)."""
    site = active_site()
    key = (framework, id(gpu), id(site))
    hit = _ENGINES.find(key, gpu, site) if constants is None else MISS
    if hit is not MISS:
        return hit
    c = constants_for(gpu)
    k = _bounded(constants or training_constants(framework, gpu.architecture), c, gpu)
    k, comm = _with_site(k, load_constants(gpu.name), gpu.name)
    if constants is None:
        _ENGINES.keep(key, (gpu, site), (c, k, comm))
    return c, k, comm


_GROUPS = IdentityMemo(4096)
"""(id(cluster), sizes, shard group, rank order) -> (cluster, PlanGroups): see `_groups`."""


def _groups(plan: ResolvedPlan, cluster: Cluster) -> PlanGroups:
    """`plan_groups`, once per cluster and the plan fields it reads (the plans of a search that
    differ in micro-batch, recompute or split share their placements)."""
    key = (id(cluster), plan.tp, plan.cp, plan.ep, plan.dp, plan.pp, plan.shard_group, plan.rank_order)
    hit = _GROUPS.find(key, cluster)
    if hit is MISS:
        hit = _GROUPS.keep(key, (cluster,), plan_groups(plan, cluster))
    return hit


def cost_context(model: ModelSpec, plan: ResolvedPlan, cluster: Cluster,
                 constants: TrainingConstants | None = None) -> CostContext:
    """Build the cost context of a resolved plan (optionally with explicit engine constants)."""
    gpu = cluster.gpu
    c, k, comm = _engine(plan.framework, gpu, constants)
    return CostContext(
        model=model, plan=plan, cluster=cluster, groups=_groups(plan, cluster),
        c=c, comm=comm, k=k,
        clock=clock_factor(gpu, cluster.power_limit_w),
        tokens=plan.micro_batch_size * plan.seq_len / plan.cp,
        act_width=4.0 if plan.precision == "fp32" else 2.0,
        gemm_dtype=_gemm_dtype(plan, cluster), full_recompute_share=_recompute_share(model, plan),
        kernel_profile=profile_for(plan.framework, plan.implementation)[0],
        attention_load=doc_imbalance(plan).attention_load if plan.doc_lengths else 1.0,
    )
