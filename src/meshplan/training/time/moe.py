"""Expert-parallel MoE costs of one layer and micro-batch: grouped expert GEMMs, token dispatch
and combine, and how much of that traffic the dispatcher hides.

Grouped GEMM. Megatron-Core (TEGroupedMLP), torchtitan and DeepSeek's DeepGEMM run all local
experts of one projection as one grouped kernel: each expert's rows are padded to the kernel's
row tile (TILE_M), the tiles of every expert share one launch and its waves over the SMs, and
every touched expert's weights are read from HBM once per pass. So the time is the larger of
a GEMM over the padded rows of all experts stacked and the weight-load floor (all touched
experts' weight bytes / HBM bandwidth): a few tokens per expert make the kernel load-bound.

Dispatch and combine (forward; backward moves the same bytes in reverse):
- `alltoall` (Megatron's default token dispatcher, torchtitan, DeepSpeed): NCCL all-to-all of
  one copy per (token, chosen expert), on the placed EP group (`costs.comm.collective_time`);
- `allgather` (Megatron's allgather dispatcher): every rank gathers the EP group's tokens and
  reduce-scatters the expert outputs;
- `flex` (Megatron's flex dispatcher over DeepEP / HybridEP): a token crosses the network once
  per remote node (or NVLink domain) holding one of its experts, then fans out over NVLink once
  per GPU, at the bottleneck bandwidths DeepEP publishes for its normal kernels (README, H800
  with 400 Gb/s CX7: intranode EP8 153 GB/s dispatch, 158 GB/s combine of ~160 GB/s NVLink;
  internode EP16/32/64 43/44/46 GB/s dispatch of ~50 GB/s RDMA). Under fp8 training the
  dispatch is fp8 (1 byte plus a 4-byte scale per 128 elements); combine stays bf16.
Exposure: without overlap the MoE block waits for an NCCL dispatch and combine; DeepEP's
hook-based receive lets the next kernels run while its RDMA traffic lands (a fitted share stays
exposed). With
`moe_a2a_overlap` (Megatron's --overlap-moe-expert-parallel-comm, 1F1B all-to-all overlap; a
DualPipe-style schedule) one micro-batch's dispatch runs under another's compute: only what
outlasts the layer's compute is exposed, plus the overlap penalty on the rest.
"""

from __future__ import annotations

import math

from meshplan.costs.comm import collective_time
from meshplan.costs.ops import TILE_M
from meshplan.costs.routing import touched_share, touched_units
from meshplan.model.spec import DenseMLP, MoEMLP
from meshplan.training.plan import QUANTIZED

GEMM_WIDTH = {"fp8": 1.0, "fp4": 0.5, "fp32": 4.0, "tf32": 4.0}
"""Stored bytes per weight element by GEMM dtype (others: 2)."""
DISPATCHERS = ("alltoall", "allgather", "flex")
"""Token dispatchers (Megatron-Core's --moe-token-dispatcher-type names)."""

DEEPEP_NVLINK_EFFICIENCY = 153.0 / 160.0
"""DeepEP normal-kernel intranode dispatch bottleneck bandwidth / NVLink peak (H800, EP8:
153 GB/s of ~160 GB/s; deepseek-ai/DeepEP README, "Normal kernels with NVLink and RDMA
forwarding")."""
DEEPEP_RDMA_EFFICIENCY = (43.0 + 44.0 + 46.0) / 3 / 50.0
"""DeepEP normal-kernel internode dispatch bottleneck bandwidth / NIC peak: the mean of the
README's EP16, EP32 and EP64 rows (43, 44, 46 GB/s) over a 400 Gb/s (50 GB/s) CX7 NIC."""
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0
"""Bytes per element of an fp8 dispatch: the value and a 4-byte scale per 128 elements (the
byte count DeepEP's tests use for fp8 dispatch)."""


def grouped_gemm_s(ctx, mlp: MoEMLP, touched: float, rows: float, split: int) -> float:
    """Forward seconds of the routed experts' projections as grouped GEMMs: `touched` local
    experts, `rows` tokens each (the busiest rank's), widths divided by `split` (expert TP)."""
    if touched <= 0 or rows <= 0:
        return 0.0
    e: DenseMLP = mlp.expert
    h, i = ctx.model.hidden_size, e.intermediate_size / split
    return (_grouped(ctx, touched, rows, i * (2 if e.gated else 1), h)
            + _grouped(ctx, touched, rows, h, i))


def _grouped(ctx, experts: float, rows: float, n: float, k: float) -> float:
    """One grouped projection: the GEMM over all experts' rows, each padded to the row tile, or
    the time to read every expert's (k x n) weights and the rows' inputs and outputs, whichever
    is longer."""
    padded = experts * TILE_M * math.ceil(rows / TILE_M)
    compute = ctx.gemm(padded, n, k)
    width = GEMM_WIDTH.get(ctx.gemm_dtype, 2.0)
    streamed = width * experts * (n * k + rows * (n + k))
    return max(compute, ctx.memory(streamed))


MOE_PERMUTE_PASSES = 8
"""Token-sized HBM passes per routed copy in one MoE forward under an NCCL dispatcher: the global
permute before the all-to-all (read the token, write its copy), the sort into expert order after
it (read, write), its inverse after the experts (read, write) and the combine that weights and
sums the copies back into their token (read, write)."""
FLEX_PERMUTE_PASSES = 4
"""The same under flex: DeepEP / HybridEP fuse the global permute into the dispatch kernel and
the weighted sum into the combine kernel (Megatron-LM, "Optimizing DeepSeek-V3 Training
Performance on NVIDIA GB200 NVL72", section 2.1.1), leaving the local sort and its inverse."""


def permute_passes(ctx) -> int:
    """Token-sized HBM passes per routed copy of the plan's dispatcher."""
    return FLEX_PERMUTE_PASSES if dispatcher(ctx) == "flex" else MOE_PERMUTE_PASSES


def dispatcher(ctx) -> str:
    """The plan's token dispatcher (resolve_plan fills the framework's default)."""
    return ctx.plan.moe_dispatcher or "alltoall"


def dispatch_width(ctx) -> float:
    """Bytes per element the dispatch moves: fp8 under flex with fp8/fp4 training, else the
    activation width."""
    if dispatcher(ctx) == "flex" and ctx.gemm_dtype in QUANTIZED:
        return FP8_DISPATCH_BYTES
    return ctx.act_width


def ep_comm_s(ctx, mlp: MoEMLP, load: float) -> float:
    """Forward dispatch + combine seconds of this rank's routed tokens (`load`: the busiest
    rank's share over the mean)."""
    p, g = ctx.plan, ctx.groups.ep
    if p.ep == 1:
        return 0.0
    tokens = ctx.tokens / p.tp  # each rank dispatches its own sequence-parallel shard
    h = ctx.model.hidden_size
    kind = dispatcher(ctx)
    if kind == "flex":
        return sum(_flex(ctx, mlp, tokens * load * h * w) for w in (dispatch_width(ctx), ctx.act_width))
    if kind == "allgather":
        size = tokens * h * ctx.act_width * g.size
        return (collective_time("all_gather", size, g, ctx.cluster, ctx.comm)
                + collective_time("reduce_scatter", size, g, ctx.cluster, ctx.comm))
    size = tokens * mlp.top_k * load * h * ctx.act_width
    return 2 * collective_time("all_to_all", size, g, ctx.cluster, ctx.comm)


def _flex(ctx, mlp: MoEMLP, token_bytes: float) -> float:
    """One DeepEP-style pass of `token_bytes` (one copy of every local token): over the network
    once per remote unit holding a chosen expert, over NVLink once per other GPU of the domain
    holding one; the slower path sets the time."""
    g, cluster = ctx.groups.ep, ctx.cluster
    per_unit = g.ranks_per_domain if cluster.scale_up_domain >= cluster.gpus_per_node else g.ranks_per_node
    units = g.size / per_unit  # the busiest unit's view, as costs.comm prices the all-to-all
    seconds = 0.0
    if units > 1:
        remote = touched_units(mlp, units) * (units - 1) / units
        nic = cluster.inter_node_bandwidth_bytes_per_s_per_gpu * DEEPEP_RDMA_EFFICIENCY
        seconds = token_bytes * remote / nic + ctx.comm.latency_inter_s
    if per_unit > 1:
        ranks = touched_share(g.size, mlp.top_k, mlp.num_experts) * (per_unit - 1) / g.size
        link = cluster.scale_up_bandwidth_bytes_per_s_per_direction * DEEPEP_NVLINK_EFFICIENCY
        seconds = max(seconds, token_bytes * ranks / link + ctx.comm.latency_intra_s)
    return seconds


def ep_exposed_s(ctx, comm: float, compute: float) -> float:
    """Seconds the dispatch and combine add to a layer pass whose compute is `compute`. With
    moe_a2a_overlap: what outlasts the compute, plus the overlap penalty on the hidden part.
    Otherwise the NCCL dispatchers block the MoE block for all of it, while flex (DeepEP's
    hook-based receive, which holds no SMs while the next kernels run) leaves the fitted
    `flex_exposed` share exposed."""
    if ctx.plan.moe_a2a_overlap:
        hidden = min(comm, compute)
        return comm - hidden + ctx.k.overlap_penalty * hidden
    if dispatcher(ctx) == "flex":
        share = ctx.k.flex_exposed
        return comm * (share + ctx.k.overlap_penalty * (1.0 - share))
    return comm
