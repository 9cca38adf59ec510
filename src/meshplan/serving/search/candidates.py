"""`serve plan`: the cheapest deployment that serves a request rate within latency SLOs.

The space per GPU type: tensor parallelism, pipeline parallelism (only when a model does not
fit otherwise), weight and KV-cache quantization, the engine's token budget, replicas, and
prefill/decode disaggregation with per-phase TP and pool sizes. Every candidate is first bounded
analytically (`bounds`): one that cannot fit, cannot meet an SLO even alone, or cannot beat the
best plan found so far is pruned without simulating. Survivors get a capacity search by
simulation (`capacity`) in a process pool, and the best are verified at the target rate.
"""

from __future__ import annotations

import dataclasses
import math

from dataclasses import dataclass, field

from meshplan.errors import ConfigError, MeshplanError
from meshplan.hardware import Cluster, get_gpu
from meshplan.model.spec import ModelSpec
from meshplan.serving.search.bounds import (ReplicaBounds, replica_bounds, replicas_needed,
                                            uncached_input_tokens)
from meshplan.serving.search.capacity import Capacity, Targets, capacity
from meshplan.serving.engine.defaults import engine_defaults
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.engine.placement import fits
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import SimulationResult
from meshplan.serving.traffic.workload import Workload

OBJECTIVES = ("min-gpus", "max-goodput-per-gpu", "min-cost")


@dataclass(slots=True, kw_only=True)
class Candidate:
    """One deployment unit: a replica (colocated) or a whole prefill + decode pair of pools."""

    gpu: str
    plan: ServingPlan
    unit_gpus: int
    bound_rate: float
    """Analytical upper bound of the unit's sustainable rate."""
    gpus_per_node: int
    """GPUs per node of its GPU type: a deployment lies on whole hosts (meshplan.serving.engine.placement)."""
    bounds: ReplicaBounds | None = None
    capacity: Capacity | None = None
    replicas: int = 0
    verified: SimulationResult | None = None
    verified_margins: dict[str, float] = field(default_factory=dict)

    @property
    def disaggregated(self) -> bool:
        return self.plan.disaggregated is not None

    @property
    def gpus(self) -> int:
        """GPUs of the whole deployment (units x replicas)."""
        return self.unit_gpus * max(self.replicas, 1)

    def goodput_per_gpu(self) -> float:
        return (self.capacity.rate if self.capacity else 0.0) / self.unit_gpus


@dataclass(slots=True, kw_only=True)
class Space:
    """What the search may vary."""

    engine: str = "vllm"
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1, 2, 4)
    budgets: tuple[int | None, ...] = (None, 2048)
    quantize: bool = False
    """Also try fp8 weights and KV cache: quantization changes the model's outputs, so it is
    opt-in; without it every plan keeps the model's own precision (NATIVE_DTYPES)."""
    disaggregate: bool = True
    memory_headroom_bytes: float = 0.0
    """GPU memory each plan must leave free (--memory-headroom): plans get a
    gpu_memory_utilization of at most 1 - headroom / HBM, which the export passes on."""


def headroom_utilization(space: Space, cluster: Cluster, tp: int, pp: int) -> float | None:
    """The gpu_memory_utilization that leaves `space.memory_headroom_bytes` free on `cluster`'s
    GPU, when the engine's default would not (None: the default already does, or no headroom).
    Only engines whose utilization is a share of the whole GPU (vLLM, SGLang) take it."""
    if not space.memory_headroom_bytes:
        return None
    hbm = cluster.gpu.hbm_bytes
    d = engine_defaults(space.engine, hbm, tp=tp, pp=pp, gpu_name=cluster.gpu.name)
    if d.memory_fraction_of != "total":
        raise ConfigError(f"--memory-headroom with --engine {space.engine}: its memory fraction is a "
                          f"share of what the weights leave, not of the GPU; use vllm or sglang, or "
                          f"drop --memory-headroom")
    cap = 1.0 - space.memory_headroom_bytes / hbm
    return round(cap, 4) if cap < d.gpu_memory_utilization else None


NATIVE_DTYPES = ("bf16", "auto")
"""(weights, KV cache) of a model published in 16 bits: bf16 weights, KV in the activation
dtype; a checkpoint with a quantization_config keeps its own weights (`auto`)."""


def native_dtypes(model: ModelSpec) -> tuple[str, str]:
    """(weights, KV cache) of `model` as published."""
    return NATIVE_DTYPES if model.weights is None else ("auto", "auto")


def quantized(c: "Candidate") -> bool:
    """Whether a candidate changes the model's precision (weights or KV cache)."""
    return c.plan.weights_dtype not in ("bf16", "auto") or c.plan.kv_cache_dtype != "auto"


def deployment_plan(c: Candidate, replicas: int | None = None) -> ServingPlan:
    """The whole deployment: the unit repeated `replicas` times (default: the candidate's), as
    colocated replicas or both disaggregated pools scaled together."""
    n = max(c.replicas if replicas is None else replicas, 1)
    if not c.disaggregated:
        return c.plan.model_copy(update={"replicas": n})
    d = c.plan.disaggregated
    return c.plan.model_copy(update={"disaggregated": d.model_copy(
        update={"prefill_gpus": d.prefill_gpus * n, "decode_gpus": d.decode_gpus * n})})


def whole_replicas(c: Candidate, needed: float) -> float:
    """The fewest replicas >= `needed` whose deployment lies in one node or on whole nodes (the
    spare GPUs of a node a deployment must take anyway become replicas); inf when none does."""
    if needed == math.inf:
        return math.inf
    first = max(int(needed), 1)
    for r in range(first, first + c.gpus_per_node + 1):
        if fits(deployment_plan(c, r), c.gpus_per_node):
            return r
    return math.inf


def _dtypes(model: ModelSpec, gpu: Cluster, quantize: bool) -> list[tuple[str, str]]:
    native = native_dtypes(model)
    out = [native]
    if quantize and "fp8" in gpu.gpu.dtypes:
        sixteen_bit = model.weights is None or model.weights.dtype in ("bf16", "fp16")
        out += [(native[0], "fp8")] + ([("fp8", "fp8")] if sixteen_bit else [])  # fp8 weights only where they shrink
    return out


def colocated(model: ModelSpec, cluster: Cluster, unit: Workload, t: Targets, space: Space,
              rate: float, max_gpus: int, pruned: dict[str, int],
              hopeless: list[Candidate] | None = None, beyond: list[Candidate] | None = None) -> list[Candidate]:
    """Replica candidates on one GPU type that fit and could meet the SLOs (those that fit but
    miss an SLO even alone go to `hopeless`, with their lone-request margins; those whose
    analytical bound needs more than `max_gpus` go to `beyond`, replicas set to that need)."""
    out, heads = [], model.layers[0].attention.num_heads
    mean_in, mean_out = uncached_input_tokens(unit), unit.total_output_tokens / len(unit)
    for pp in space.pps:
        fitted_any = False
        for tp in space.tps:
            if heads % tp or tp * pp > min(max_gpus, cluster.gpus_per_node * pp):
                continue
            for weights, kv in _dtypes(model, cluster, space.quantize):
                for budget in space.budgets:
                    plan = ServingPlan(engine=space.engine, tp=tp, pp=pp, weights_dtype=weights, kv_cache_dtype=kv,
                                       max_num_batched_tokens=budget,
                                       gpu_memory_utilization=headroom_utilization(space, cluster, tp, pp))
                    cand = _bounded(model, cluster, plan, unit, t, mean_in, mean_out, pruned)
                    if cand is None:
                        continue
                    fitted_any = True
                    if cand.capacity is not None:
                        if hopeless is not None:
                            hopeless.append(cand)
                        continue
                    need = whole_replicas(cand, replicas_needed(rate, cand.bound_rate))
                    if need * cand.unit_gpus > max_gpus:
                        pruned["bound: cannot reach the rate within --max-gpus"] += 1
                        if beyond is not None and need < math.inf:
                            beyond.append(dataclasses.replace(cand, replicas=need))
                        continue
                    out.append(cand)
        if fitted_any:
            break  # deeper pipelines only for models that do not fit otherwise
    return out


def _bounded(model, cluster, plan, unit, t, mean_in, mean_out, pruned) -> Candidate | None:
    try:
        (pool,) = resolve_pools(model, _sized(cluster, plan.num_gpus), plan, unit)
    except MeshplanError:
        pruned["does not fit in memory"] += 1
        return None
    (replica,) = build_replicas(model, _sized(cluster, plan.num_gpus), pool, unit, IterationLog(), 0)
    b = replica_bounds(pool, replica.cost, mean_in, mean_out, t)
    cand = Candidate(gpu=cluster.gpu.name, plan=plan, unit_gpus=plan.num_gpus, bound_rate=b.max_rate, bounds=b,
                     gpus_per_node=cluster.gpus_per_node)
    lone = {"ttft": b.ttft_ms / t.ttft_ms if t.ttft_ms else 0.0, "tpot": b.tpot_ms / t.tpot_ms if t.tpot_ms else 0.0}
    if max(lone.values()) > 1:
        pruned["bound: a lone request already misses an SLO"] += 1
        cand.capacity = Capacity(rate=0.0, margins={k: v for k, v in lone.items() if v}, result=None, simulations=0)
    return cand


def _sized(cluster: Cluster, n: int) -> Cluster:
    """The same hardware with room for `n` GPUs (whole nodes once it spans several)."""
    per_node = cluster.gpus_per_node
    n = n if n <= per_node else -(-n // per_node) * per_node
    return Cluster(gpu=cluster.gpu, num_gpus=n, gpus_per_node=per_node,
                   scale_up_domain=cluster.scale_up_domain,
                   inter_node_bandwidth_bytes_per_s_per_gpu=cluster.inter_node_bandwidth_bytes_per_s_per_gpu,
                   power_limit_w=cluster.power_limit_w)


def disaggregated(replicas: list[Candidate], rate: float, max_gpus: int, pruned: dict[str, int]) -> list[Candidate]:
    """Prefill + decode pool pairs sized analytically from the replica bounds (same GPU type,
    dtypes and budget; each phase picks its own TP)."""
    out = []
    for p in replicas:
        for d in replicas:
            same = (p.gpu, p.plan.pp, p.plan.weights_dtype, p.plan.kv_cache_dtype, p.plan.max_num_batched_tokens)
            if same != (d.gpu, d.plan.pp, d.plan.weights_dtype, d.plan.kv_cache_dtype, d.plan.max_num_batched_tokens):
                continue
            n_p = replicas_needed(rate, p.bounds.prefill_rate)
            n_d = replicas_needed(rate, d.bounds.decode_rate)
            gpus = n_p * p.unit_gpus + n_d * d.unit_gpus
            if gpus > max_gpus:
                pruned["bound: disaggregated pools exceed --max-gpus"] += 1
                continue
            dis = Disaggregation(prefill_gpus=n_p * p.unit_gpus, decode_gpus=n_d * d.unit_gpus,
                                 prefill_tp=p.plan.tp, decode_tp=d.plan.tp)
            plan = p.plan.model_copy(update={"disaggregated": dis})
            bound = min(n_p * p.bounds.prefill_rate, n_d * d.bounds.decode_rate)
            out.append(Candidate(gpu=p.gpu, plan=plan, unit_gpus=gpus, bound_rate=bound, gpus_per_node=p.gpus_per_node))
    return out


def portable(cluster: Cluster) -> tuple:
    """`cluster` as picklable values for a worker process (the GPU travels by catalog name)."""
    return (cluster.gpu.name, cluster.gpus_per_node, cluster.scale_up_domain,
            cluster.inter_node_bandwidth_bytes_per_s_per_gpu, cluster.power_limit_w)


def rebuilt(hw: tuple, n: int) -> Cluster:
    """The cluster of `portable(...)` with room for `n` GPUs."""
    gpu, per_node, domain, network, power = hw
    return _sized(Cluster(gpu=get_gpu(gpu), num_gpus=1, gpus_per_node=per_node, scale_up_domain=domain,
                          inter_node_bandwidth_bytes_per_s_per_gpu=network, power_limit_w=power), n)


def job_args(model, cluster: Cluster, plan: ServingPlan, unit: Workload, t: Targets, upper: float,
             window: float | None = None, saturated: float | None = None) -> tuple:
    """Picklable arguments of `_job` (capacity's)."""
    return model, portable(cluster), plan, unit, t, upper, window, saturated


def _job(args) -> Capacity:
    """Capacity of one candidate (run in a worker process; the simulation is not sent back)."""
    model, hw, plan, unit, t, upper, window, saturated = args
    cluster = rebuilt(hw, plan.num_gpus)
    try:
        cap = capacity(model, cluster, plan, unit, t, upper=upper, window=window, saturated=saturated)
    except MeshplanError:
        return Capacity(rate=0.0, margins={}, result=None, simulations=1)
    return dataclasses.replace(cap, result=None)


def best_case(c: Candidate, rate: float, objective: str, price: float | None) -> float:
    """The objective's best possible value for a candidate (lower is better)."""
    reps = whole_replicas(c, replicas_needed(rate, c.bound_rate))
    if objective == "max-goodput-per-gpu":
        return -c.bound_rate / c.unit_gpus
    gpus = c.unit_gpus * reps
    return gpus * (price or 1.0) if objective == "min-cost" else gpus


def score(c: Candidate, objective: str, price: float | None) -> tuple:
    """Sort key of an evaluated candidate (lower is better)."""
    if objective == "max-goodput-per-gpu":
        return (-c.goodput_per_gpu(), c.gpus)
    cost = c.gpus * (price or 1.0) if objective == "min-cost" else c.gpus
    return (cost, -c.goodput_per_gpu())
