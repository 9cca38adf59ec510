"""Per-GPU memory of a training plan, per pipeline stage, and whether it fits.

Each stage's peak is the sum of its model states (`states`), the activations its schedule keeps
alive (`schedules` x `activations`), the last stage's logits and loss buffers, communication
buffers, a one-layer backward working set, allocator fragmentation and the CUDA context. What
offload moves off the GPU (states, parameters, activations) is counted against the host's share of
DRAM and NVMe instead (`training.time.offload`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache, reduce
from operator import add

from meshplan.hardware import Cluster
from meshplan.model.counts import layer_kinds
from meshplan.model.spec import ModelSpec
from meshplan.training.memory import activations as act
from meshplan.training.finetune import adapters as finetune
from meshplan.training.time.offload import offloaded_bytes
from meshplan.training.pipeline.peak_walk import walk_peak
from meshplan.training.layout.resolve import ResolvedPlan
from meshplan.training.pipeline.schedules import in_flight_chunks
from meshplan.training.memory.states import (
    SHARDED_STATES,
    StageParams,
    plan_memo,
    shared_memo,
    stage_chunk_kinds,
    stage_kind_counts,
    stage_params,
    stage_signatures,
    state_bytes,
    updated_params,
)

FRAGMENTATION = 0.05
"""Allocator slack (reserved minus allocated) as a fraction of allocated bytes at the peak."""
CUDA_CONTEXT_BYTES = 1.0 * 2**30
"""CUDA context, NCCL communicators and library handles: outside the caching allocator."""
WORKSPACE_BYTES = 0.25 * 2**30
"""cuBLAS/cuDNN/Transformer Engine workspaces inside the allocator."""
LOGIT_BYTES = {"megatron": 6.0, "hf": 6.0, "torchtitan": 4.0}
"""Bytes per logit held until backward: the fp32 softmax the loss saves, plus the bf16 logits
where the framework keeps them (torchtitan deletes them after the loss)."""
LOGIT_TRANSIENT_BYTES = 8.0
"""Extra bytes per logit at the loss peak: the fp32 gradient of the log-softmax and of its input
while backward starts (the forward's fp32 upcast is of the same size and already freed)."""
FUSED_LOGIT_BYTES = {"fused": (2.0, 0.0), "compiled": (4.0, 2.0)}
"""(held, transient) bytes per logit when the trainer fuses the loss (TrainingPlan.implementation):
llm.c's fused classifier keeps only the bf16 logits and overwrites them with their gradient;
torch.compile keeps the fp32 log-probabilities for backward and writes a bf16 gradient."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """Peak bytes on one GPU of a pipeline stage, by kind."""

    stage: int
    num_layers: int
    in_flight_microbatches: float
    weights_bytes: float
    gradients_bytes: float
    master_weights_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float
    buffers_bytes: float
    workspace_bytes: float
    fragmentation_bytes: float
    cuda_context_bytes: float
    host_bytes: float = 0.0
    """Host DRAM this GPU's offloaded states and activations take (not in total_bytes)."""
    nvme_bytes: float = 0.0
    """NVMe this GPU's offloaded states take (ZeRO-Infinity's NVMe tier)."""

    @property
    def other_bytes(self) -> float:
        """Communication buffers, workspaces, fragmentation and CUDA context: with weights,
        gradients, master weights, optimizer states, activations and logits it adds up to
        total_bytes (it held the logits too, which the table and JSON also list apart)."""
        return (self.buffers_bytes + self.workspace_bytes + self.fragmentation_bytes
                + self.cuda_context_bytes)

    @property
    def total_bytes(self) -> float:
        """Everything on the GPU at the stage's peak: the sum of the parts above."""
        rest = (self.logits_bytes + self.buffers_bytes + self.workspace_bytes
                + self.fragmentation_bytes + self.cuda_context_bytes)  # summed as it always was
        return (self.weights_bytes + self.gradients_bytes + self.master_weights_bytes
                + self.optimizer_bytes + self.activations_bytes + rest)

    @property
    def allocator_bytes(self) -> float:
        """What PyTorch's caching allocator reserves at the peak (total minus CUDA context)."""
        return self.total_bytes - self.cuda_context_bytes

    def to_dict(self) -> dict:
        """Plain dict with the derived totals."""
        return {**asdict(self), "other_bytes": self.other_bytes, "total_bytes": self.total_bytes,
                "allocator_bytes": self.allocator_bytes}


def offload_states(out: dict[str, float], plan: ResolvedPlan) -> dict[str, float]:
    """Model states per GPU (`out`) less what optimizer and parameter offload keep elsewhere."""
    if plan.offload_optimizer:
        out["master"] = out["optimizer"] = 0.0
        if plan.dp_sharding in ("gradients", "full"):
            # ZeRO-Offload moves each reduced gradient bucket to the host as it is produced;
            # the bucket in flight is in buffers_bytes (Ren et al. 2021, section 4.1).
            out["gradients"] = 0.0
    if plan.offload_params:
        out["weights"] = 0.0  # fetched per layer into the gather buffers (buffers_bytes)
    return out


def model_states(params: StageParams, model: ModelSpec, plan: ResolvedPlan) -> dict[str, float]:
    """Weights, gradients, master weights and optimizer states per GPU for one stage."""
    per_param = state_bytes(plan, model.hidden_size)
    sharded = SHARDED_STATES[plan.dp_sharding]
    out = {}
    for name in ("weights", "gradients", "master", "optimizer"):
        dense, expert = params.dense, params.expert
        if name in sharded:
            dense, expert = dense / plan.shard_group, expert / plan.expert_dp
        out[name] = getattr(per_param, name) * (dense + expert)
    out = offload_states(out, plan)
    if plan.dp_sharding == "full" and plan.pp > 1 and act.profile_name(plan) == "torchtitan":
        # torch.distributed.pipelining keeps FSDP units unsharded through the step (no
        # re-gather per micro-batch) and skips gradient reduce-scatter until the last
        # micro-batch, so unsharded bf16 weights and fp32 gradients accumulate on the stage.
        unsharded = params.dense + params.expert
        out["weights"] += 2.0 * unsharded
        out["gradients"] += 4.0 * unsharded
    return out


def _stored_layer_bytes(model: ModelSpec, plan: ResolvedPlan, index: int, recomputed: bool,
                        on_gpu: bool = True) -> float:
    """What layer `index` keeps between its forward and backward for one micro-batch: on the
    GPU (nothing when activations are offloaded), or wherever it is kept (`on_gpu` False)."""
    if on_gpu and plan.offload_activations:
        return 0.0
    if recomputed:
        return act.checkpoint_bytes(model, plan)
    return _layer_bytes(model, plan, index, plan.recompute == "selective")


def saved_layer_bytes(model: ModelSpec, plan: ResolvedPlan, chunk: tuple[int, ...]) -> list[float]:
    """Bytes each layer of `chunk` saves for backward per micro-batch, wherever it is kept."""
    budget = len(chunk) if plan.recompute_num_layers is None else plan.recompute_num_layers
    full = plan.recompute == "full"
    return [_stored_layer_bytes(model, plan, i, full and k < budget, on_gpu=False)
            for k, i in enumerate(chunk)]


def _layer_bytes(model: ModelSpec, plan: ResolvedPlan, index: int, selective: bool = False) -> float:
    """act.layer_activation_bytes of layer `index`, once per layer kind per plan."""
    memo = plan_memo(model, plan)
    kind = layer_kinds(model)[index]
    key = ("layer_bytes", kind, selective)
    if key not in memo:
        memo[key] = act.layer_activation_bytes(model.layers[kind], model, plan, selective=selective)
    return memo[key]


def chunk_activation_bytes(model: ModelSpec, plan: ResolvedPlan, chunk: tuple[int, ...],
                           on_gpu: bool = True) -> float:
    """Stored activations of one model chunk for one micro-batch (on the GPU, or anywhere): the
    layers' bytes added in layer order, each distinct (kind, recomputed) costed once."""
    full = plan.recompute == "full"
    budget = len(chunk) if plan.recompute_num_layers is None else plan.recompute_num_layers
    keys = _layer_keys(tuple(map(layer_kinds(model).__getitem__, chunk)), budget if full else 0)
    first = dict(zip(keys, chunk))  # a layer index of each distinct key
    values = {key: _stored_layer_bytes(model, plan, first[key], key[1], on_gpu) for key in first}
    return reduce(add, map(values.__getitem__, keys), 0.0)  # left to right, as a loop adds


@lru_cache(maxsize=1024)
def _layer_keys(kinds: tuple[int, ...], recomputed: int) -> tuple[tuple[int, bool], ...]:
    """(kind, recomputed) of each layer of a chunk of layer kinds `kinds` whose first
    `recomputed` layers full recompute re-runs."""
    return tuple((k, j < recomputed) for j, k in enumerate(kinds))


CHUNK_BYTES_UNREAD = frozenset({
    "dp", "ep", "shard_group", "expert_dp", "global_batch_size", "num_microbatches", "dp_sharding",
    "schedule", "offload_optimizer", "offload_params", "offload_target", "optimizer", "rank_order",
    "tp_comm_overlap", "chosen", "warnings"})
"""Plan fields the activations a chunk stores do not read: `act.NOT_ACTIVATION_FIELDS` but for
what acts on them here (recompute, activation offload, the split into chunks)."""


def _chunk_sum(model: ModelSpec, plan: ResolvedPlan, chunk: tuple[int, ...], kinds: tuple[int, ...],
               on_gpu: bool) -> float:
    """`chunk_activation_bytes` of `chunk`, whose layers are of `kinds`: the sum depends on the
    layer kinds alone, so chunks of one shape (most chunks of a split) are added up once per plan."""
    memo = plan_memo(model, plan)
    key = ("chunk_sum", kinds, on_gpu)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = chunk_activation_bytes(model, plan, chunk, on_gpu)
    return hit


def _chunk_bytes(model: ModelSpec, plan: ResolvedPlan, stage: int,
                 on_gpu: bool = True) -> tuple[list[float], float]:
    """(stored bytes of each of the stage's chunks for one micro-batch, the backward working set
    of its largest layer), once per stage signature and per plan fields it reads (shared by
    plans differing only in `CHUNK_BYTES_UNREAD`)."""
    fast = plan_memo(model, plan)  # this plan's answer, before the shared memo's lookups
    hit = fast.get(("chunk_bytes", stage, on_gpu))
    if hit is not None:
        return hit
    memo = shared_memo(model, plan, "chunk_bytes", CHUNK_BYTES_UNREAD)
    key = (stage_signatures(model, plan)[stage], on_gpu)
    if key not in memo:
        chunks = plan.chunk_layers[stage::plan.pp]  # chunk c runs on stage c % pp
        distinct = (k for k, _ in stage_kind_counts(model, plan, stage))
        kinds = stage_chunk_kinds(model, plan, stage)
        memo[key] = ([_chunk_sum(model, plan, c, k, on_gpu) for c, k in zip(chunks, kinds)],
                     max(_layer_bytes(model, plan, k) for k in distinct))
    fast[("chunk_bytes", stage, on_gpu)] = memo[key]
    return memo[key]


def stage_activations(model: ModelSpec, plan: ResolvedPlan, stage: int, head_bytes: float = 0.0,
                      on_gpu: bool = True) -> tuple[float, float, int]:
    """(stored activation bytes at the stage's peak, in-flight micro-batches, logits held).

    One chunk per stage, or equal chunks off the last stage: the schedule's closed form. Uneven
    chunks (a first or last chunk lighter) or the LM head's chunk under virtual stages: walk the
    schedule's op order, since which chunks are alive at the peak then matters."""
    per_chunk, working = _chunk_bytes(model, plan, stage, on_gpu)  # working: backward of one layer
    alive = closed_form_in_flight(model, plan, stage, head_bytes, on_gpu)
    if alive is not None:
        held = max(alive, 1) if head_bytes else 0
        return per_chunk[0] * alive + working, alive / plan.vpp, held
    key = (plan.schedule, plan.pp, plan.vpp, plan.num_microbatches, stage)
    stored, alive, held = walk_peak(key, per_chunk, head_bytes)
    return stored + working, alive / plan.vpp, max(held, 1) if head_bytes else 0


def closed_form_in_flight(model: ModelSpec, plan: ResolvedPlan, stage: int, head_bytes: float,
                          on_gpu: bool = True) -> int | None:
    """Chunks in flight at `stage`'s peak by the schedule's closed form, which holds with one
    chunk per stage or equal chunks off the LM head's stage; None when the op order is walked."""
    per_chunk, _ = _chunk_bytes(model, plan, stage, on_gpu)
    uniform = len(set(per_chunk)) == 1 and not (head_bytes and plan.vpp > 1)
    if plan.vpp == 1 or uniform:
        return in_flight_chunks(plan.schedule, stage, plan.pp, plan.vpp, plan.num_microbatches)
    return None


def logits_bytes(model: ModelSpec, plan: ResolvedPlan, stage: int) -> tuple[float, float]:
    """(bytes per held micro-batch, transient bytes at the loss) of the last stage's logits and
    loss buffers (vocabulary-parallel over tp); zero off the last stage."""
    if stage != plan.pp - 1:
        return 0.0, 0.0
    tokens = plan.micro_batch_size * plan.seq_len / plan.cp
    logits = tokens * model.vocab_size / plan.tp
    if plan.implementation in FUSED_LOGIT_BYTES:
        held, transient = FUSED_LOGIT_BYTES[plan.implementation]
        return logits * held, logits * transient
    return logits * LOGIT_BYTES[act.profile_name(plan)], logits * LOGIT_TRANSIENT_BYTES


def buffers_bytes(params: StageParams, model: ModelSpec, plan: ResolvedPlan) -> float:
    """Communication buffers: FSDP gathers (current + prefetched unit) and the reduce-scatter,
    ZeRO-2's unsharded gradients of the unit being reduce-scattered, DDP gradient buckets, and
    the sequence-parallel all-gather / reduce-scatter of one layer."""
    total = 0.0
    if plan.dp_sharding == "full":
        total += params.largest_unit * (2 * 2.0 + 2.0 + 4.0)
    elif plan.dp_sharding == "gradients":
        # Sharded gradients still exist unsharded, one unit (bucket) at a time, between the
        # unit's backward and its reduce-scatter (ZeRO-2, Rajbhandari et al. 2020, 5.2; Llama 3
        # reduce-scatters them in fp32 under FSDP, arXiv 2407.21783, 3.3.2).
        total += params.largest_unit * state_bytes(plan, model.hidden_size).gradients
    elif plan.dp_sharding == "none" and plan.framework not in ("megatron", "nemo"):
        total += 2 * 25 * 2**20  # PyTorch DDP's gradient buckets
    if plan.sequence_parallel:
        tokens = plan.micro_batch_size * plan.seq_len / plan.cp
        total += 2 * tokens * model.hidden_size * act.act_bytes(plan)  # gathered input + output
    return total


STATIC_UNREAD = frozenset({"recompute", "recompute_num_layers", "schedule", "num_microbatches",
                           "global_batch_size", "chosen", "warnings"})
"""Plan fields a stage's model states, logits, buffers and offloaded bytes do not read (what
recompute and the schedule change is the activations, counted apart)."""


def _stage_static(model: ModelSpec, plan: ResolvedPlan, stage: int) -> tuple:
    """(model states, logits bytes per held micro-batch, transient logits, buffers, layers) of
    a stage: what does not depend on its place in the schedule, once per stage signature and
    per plan fields it reads (shared by plans differing only in `STATIC_UNREAD`)."""
    fast = plan_memo(model, plan)  # this plan's answer, before the shared memo's lookups
    hit = fast.get(("stage_static", stage))
    if hit is not None:
        return hit
    memo = shared_memo(model, plan, "stage_static", STATIC_UNREAD)
    key = stage_signatures(model, plan)[stage]
    if key not in memo:
        params = stage_params(model, plan, stage)
        held_bytes, transient = logits_bytes(model, plan, stage)
        if finetune.is_finetune(plan):  # adapters train, the base is frozen
            states = offload_states(finetune.model_states(model, plan, stage, params), plan)
            trained = finetune.trainable_stage_params(model, plan, stage)
        else:
            states, trained = model_states(params, model, plan), params
        offloaded = offloaded_bytes(plan, state_bytes(plan, model.hidden_size),
                                    updated_params(trained, plan))
        memo[key] = (states, held_bytes, transient,
                     buffers_bytes(params, model, plan), _layer_count(model, plan, stage), offloaded)
    fast[("stage_static", stage)] = memo[key]
    return memo[key]


def _layer_count(model: ModelSpec, plan: ResolvedPlan, stage: int) -> int:
    """Decoder layers on `stage` (`len(plan.stage_layers(stage))`, from the cached layout)."""
    return sum(n for _, n in stage_kind_counts(model, plan, stage))


def offloaded_activations(model: ModelSpec, plan: ResolvedPlan, stage: int) -> float:
    """Host bytes of the activations `stage` offloads: what its in-flight micro-batches would keep
    on the GPU (the working set of the layer in backward stays on the GPU)."""
    if not plan.offload_activations:
        return 0.0
    stored, _, _ = stage_activations(model, plan, stage, on_gpu=False)
    return stored - _chunk_bytes(model, plan, stage, on_gpu=False)[1]


def stage_memory(model: ModelSpec, plan: ResolvedPlan, stage: int) -> StageMemory:
    """The peak memory breakdown of one GPU of `stage`."""
    static = _stage_static(model, plan, stage)
    acts, alive, held = stage_activations(model, plan, stage, static[1])
    return _assemble(static, stage, acts, alive, held, offloaded_activations(model, plan, stage))


def _assemble(static: tuple, stage: int, acts: float, alive: float, held: int,
              host_acts: float) -> StageMemory:
    """A stage's breakdown from its static part (`_stage_static`), the activations at its peak,
    and the activation bytes it offloads to the host."""
    states, held_bytes, transient, buffers, num_layers, (host, nvme) = static
    logits = held_bytes * held + transient
    allocated = sum(states.values()) + acts + logits + buffers + WORKSPACE_BYTES
    return StageMemory(
        stage=stage, num_layers=num_layers, in_flight_microbatches=alive,
        weights_bytes=states["weights"], gradients_bytes=states["gradients"],
        master_weights_bytes=states["master"], optimizer_bytes=states["optimizer"],
        activations_bytes=acts, logits_bytes=logits, buffers_bytes=buffers,
        workspace_bytes=WORKSPACE_BYTES, fragmentation_bytes=FRAGMENTATION * allocated,
        cuda_context_bytes=CUDA_CONTEXT_BYTES, host_bytes=host + host_acts, nvme_bytes=nvme,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEstimate:
    """Memory of a plan on a cluster: every stage, the peak, and the verdict."""

    plan: ResolvedPlan
    stages: tuple[StageMemory, ...]
    gpu_memory_bytes: float
    activation_bytes_per_layer: float
    """Bytes one decoder layer saves for one micro-batch on one GPU, before recompute."""
    trainable_params: int = 0
    """Parameters the optimizer updates (all of them, or the LoRA adapters')."""
    host_memory_bytes: float = float("inf")
    """Host DRAM one GPU's offload may use: the node's, shared by the job's GPUs on it."""
    nvme_capacity_bytes: float = float("inf")
    """NVMe one GPU's offload may use: the node's drives, shared likewise."""
    memory_headroom_bytes: float = 0.0
    """GPU memory the plan must leave free (`Cluster.memory_headroom_bytes`)."""

    @property
    def usable_gpu_memory_bytes(self) -> float:
        """What the peak stage may use: the GPU's memory less the headroom asked for."""
        return self.gpu_memory_bytes - self.memory_headroom_bytes

    @property
    def peak_stage(self) -> StageMemory:
        """The stage with the largest total."""
        return max(self.stages, key=lambda s: s.total_bytes)

    @property
    def peak_bytes(self) -> float:
        """Largest per-GPU total over stages."""
        return self.peak_stage.total_bytes

    @property
    def host_peak_bytes(self) -> float:
        """Largest host DRAM use per GPU over stages (offloaded states and activations)."""
        return max(s.host_bytes for s in self.stages)

    @property
    def nvme_peak_bytes(self) -> float:
        """Largest NVMe use per GPU over stages."""
        return max(s.nvme_bytes for s in self.stages)

    @property
    def short_of(self) -> str | None:
        """The first tier a stage overflows: "GPU memory", "host memory" or "NVMe"; None fits."""
        if self.peak_bytes > self.usable_gpu_memory_bytes:
            return "GPU memory"
        if self.host_peak_bytes > self.host_memory_bytes:
            return "host memory"
        if self.nvme_peak_bytes > self.nvme_capacity_bytes:
            return "NVMe"
        return None

    @property
    def fits(self) -> bool:
        """True when every stage fits in the GPU's memory and its offloaded bytes in the host's
        share of DRAM and NVMe."""
        return self.short_of is None


HOST_RESERVED_FRACTION = 0.1
"""Share of host DRAM not available to offload: the OS, the page cache, data-loader workers and
the framework's own process memory. Assumption, not fitted."""


def host_capacity(cluster: Cluster) -> tuple[float, float]:
    """(host DRAM, NVMe) bytes one GPU's offload may use: each node's, split evenly over the
    job's GPUs on it."""
    n = cluster.gpus_on_node
    return (cluster.host_memory_bytes_per_node * (1 - HOST_RESERVED_FRACTION) / n,  # type: ignore[operator]
            cluster.nvme_bytes_per_node / n)  # type: ignore[operator]


def fits_memory(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan) -> bool:
    """`estimate_memory(...).fits`, stopping at the first stage that does not fit; the first
    and last stages (most micro-batches in flight; the LM head) are checked first.

    Two exact shortcuts, both resting on float addition and scaling by a non-negative constant
    being monotone: a stage whose total without activations and held logits (`_assemble` with
    none) already overflows cannot fit with them; and a stage with the signature of one that fit
    and no more chunks in flight by the closed form (without activation offload) holds the same
    states with no more activations, so it fits too and is not assembled."""
    capacity = cluster.usable_gpu_memory_bytes
    host, nvme = host_capacity(cluster)
    order = (0, plan.pp - 1, *range(1, plan.pp - 1)) if plan.pp > 1 else (0,)
    signatures = stage_signatures(model, plan)
    fitted: dict = {}  # signature: most chunks in flight of its stages that fit (None: walked)
    for s in order:
        sig = signatures[s]
        if sig in fitted:
            alive = None if fitted[sig] is None else in_flight_chunks(
                plan.schedule, s, plan.pp, plan.vpp, plan.num_microbatches)
            if alive is not None and fitted[sig] >= alive:
                continue
        elif _floor(model, plan, s) > capacity:
            return False
        stage = stage_memory(model, plan, s)
        if stage.total_bytes > capacity or stage.host_bytes > host or stage.nvme_bytes > nvme:
            return False
        if sig not in fitted:  # whether the closed form holds is the signature's
            fitted[sig] = None if plan.offload_activations else closed_form_in_flight(
                model, plan, s, _stage_static(model, plan, s)[1])
        elif alive is not None:
            fitted[sig] = max(fitted[sig], alive)
    return True


def _floor(model: ModelSpec, plan: ResolvedPlan, stage: int) -> float:
    """The stage's total without activations and held logits, a lower bound on its peak (once
    per `_stage_static`)."""
    memo = shared_memo(model, plan, "stage_static", STATIC_UNREAD)
    key = ("floor", stage_signatures(model, plan)[stage])
    if key not in memo:
        memo[key] = _assemble(_stage_static(model, plan, stage), stage, 0.0, 0.0, 0, 0.0).total_bytes
    return memo[key]


def estimate_memory(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan) -> MemoryEstimate:
    """Per-stage peak memory of a resolved plan on `cluster`'s GPUs."""
    stages = tuple(stage_memory(model, plan, s) for s in range(plan.pp))
    first = model.layers[plan.chunk_layers[0][0]]
    host, nvme = host_capacity(cluster)
    return MemoryEstimate(
        plan=plan, stages=stages, gpu_memory_bytes=float(cluster.gpu.hbm_bytes),
        activation_bytes_per_layer=act.layer_activation_bytes(first, model, plan),
        trainable_params=finetune.trainable_params(model, plan),
        host_memory_bytes=host, nvme_capacity_bytes=nvme,
        memory_headroom_bytes=cluster.memory_headroom_bytes,
    )
