"""Build the replicas of a deployment: engine defaults, KV blocks, costs, scheduler rules."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.hardware.host import host_for
from meshplan.model.spec import ModelSpec
from meshplan.calibration.site import active_site
from meshplan.serving.cost.constants import EngineConstants, constants_key, engine_constants
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.engine.defaults import EngineDefaults, engine_defaults
from meshplan.serving.cost.deepep import uses_deepep
from meshplan.serving.cost.graphs import graph_policy
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.engine.kvcache import BlockPool
from meshplan.serving.engine.kvtier import CpuTier, capacity_units
from meshplan.serving.cost.lora import (AdapterSlots, adapter_bytes, check_lora, load_seconds,
                                        lora_slots)
from meshplan.serving.cost.memory import (ServingMemory, kv_layout, serving_memory, stage_layers,
                                          weight_bytes_per_gpu)
from meshplan.serving.plan import ServingPlan
from meshplan.serving.engine.replica import Replica
from meshplan.serving.engine.scheduler import SchedulerConfig, expected_tokens_per_step
from meshplan.serving.traffic.stream import StreamWorkload
from meshplan.serving.traffic.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """Identical replicas of one role, as resolved."""

    role: str
    replicas: int
    plan: ServingPlan
    scheduler: SchedulerConfig
    memory: ServingMemory
    defaults: EngineDefaults

    def to_dict(self) -> dict:
        """What was chosen, for JSON output."""
        s, m = self.scheduler, self.memory
        out = {"role": self.role, "replicas": self.replicas, "tp": self.plan.tp, "pp": self.plan.pp,
               "ep": self.plan.ep, "dp": self.plan.dp, "max_num_seqs": s.max_num_seqs,
               "max_num_batched_tokens": s.max_num_batched_tokens, "chunked_prefill": s.chunked_prefill,
               "reserve_full": s.reserve_full, "kv_blocks": m.num_blocks, "block_size": m.block_size,
               "kv_tokens": m.kv_tokens, "weights_gib": m.weights_bytes / 2**30,
               "kv_cache_gib": m.kv_bytes / 2**30}
        if s.num_scheduler_steps > 1:
            out["num_scheduler_steps"] = s.num_scheduler_steps
        return out


SGLANG_CLIP_MAX_NEW_TOKENS = 4096
"""SGLang's cap on the output tokens its admission control reserves per request
(SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096: srt/managers/schedule_policy.py)."""


def _scheduler(plan: ServingPlan, d: EngineDefaults) -> SchedulerConfig:
    # With pipeline parallelism the engines keep pp batches in flight, each within the limits.
    seqs = (plan.max_num_seqs or d.max_num_seqs) * plan.pp
    tokens = (plan.max_num_batched_tokens or d.max_num_batched_tokens) * plan.pp
    chunked = d.chunked_prefill if plan.chunked_prefill is None else plan.chunked_prefill
    multi = plan.num_scheduler_steps > 1  # vLLM V0's default scheduler: whole prompts, prefill first
    chunked = chunked and not multi
    policy = plan.scheduler_policy or d.scheduler_policy
    if plan.engine == "vllm" and tokens < seqs:
        raise ConfigError(f"max_num_batched_tokens ({tokens}) must be at least max_num_seqs ({seqs}) in vLLM")
    e = expected_tokens_per_step(plan.speculative_tokens, plan.acceptance_rate or 0.0)
    return SchedulerConfig(engine=plan.engine, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                           chunked_prefill=chunked, reserve_full=policy == "guaranteed-no-evict",
                           mixed_batches=plan.engine != "sglang" and not multi,
                           future_token_ratio=0.3 if plan.engine == "sglang" else 0.0,
                           admission_clip=SGLANG_CLIP_MAX_NEW_TOKENS if plan.engine == "sglang" else 0,
                           speculative_tokens=plan.speculative_tokens, tokens_per_step=e,
                           num_scheduler_steps=plan.num_scheduler_steps)


def _defaults(model: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload,
              offline: bool, kv_tokens: int | None = None) -> EngineDefaults:
    """The engine's defaults for this GPU, model and (for trtllm-bench) mean lengths."""
    n = len(workload.requests)
    mean_in = round(workload.total_input_tokens / n) if n else None
    mean_out = round(workload.total_output_tokens / n) if n else None
    whole = plan.model_copy(update={"tp": 1, "pp": 1, "ep": 1})
    return engine_defaults(
        plan.engine, cluster.gpu.hbm_bytes, tp=plan.tp * plan.dp, pp=plan.pp, input_len=mean_in, output_len=mean_out,
        offline=offline, gpu_name=cluster.gpu.name, kv_tokens=kv_tokens, version=plan.engine_version,
        context_len=model.max_position_embeddings or 8192,
        weights_bytes=int(weight_bytes_per_gpu(model, whole)),
        kv_bytes_per_token=int(kv_layout(model, whole).bytes_per_token))


def _memory(model: ModelSpec, cluster: Cluster, plan: ServingPlan, d: EngineDefaults,
            sched: SchedulerConfig) -> ServingMemory:
    util = plan.gpu_memory_utilization or d.gpu_memory_utilization
    return serving_memory(model, cluster.gpu, plan, utilization=util, block_size=plan.block_size or d.block_size,
                          max_tokens=sched.max_num_batched_tokens // plan.pp, max_seqs=sched.max_num_seqs // plan.pp,
                          fraction_of=d.memory_fraction_of)


def _pool(role: str, replicas: int, model: ModelSpec, cluster: Cluster, plan: ServingPlan,
          workload: Workload, offline: bool) -> Pool:
    d = _defaults(model, cluster, plan, workload, offline)
    sched = _scheduler(plan, d)
    mem = _memory(model, cluster, plan, d, sched)
    if plan.engine == "sglang" and plan.max_num_seqs is None:  # its cap depends on the KV pool
        d = _defaults(model, cluster, plan, workload, offline, kv_tokens=mem.kv_tokens)
        sched = _scheduler(plan, d)
    return Pool(role=role, replicas=replicas, plan=plan, scheduler=sched, memory=mem, defaults=d)


def resolve_pools(model: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload) -> list[Pool]:
    """The pools of a deployment (one colocated pool, prefill + decode, or one phase pool of a
    disaggregated deployment), checked to fit."""
    offline = workload.concurrency is None and (
        workload.offline if isinstance(workload, StreamWorkload) else all(r.arrival_s == 0 for r in workload.requests))
    if plan.mtp_drafts and not model.mtp_layers:
        raise ConfigError(f"speculative_method='mtp': {model.name} has no multi-token-prediction "
                          f"module (its config has no num_nextn_predict_layers); use 'eagle'")
    if plan.num_gpus > cluster.num_gpus:
        raise ConfigError(f"the plan needs {plan.num_gpus} GPUs but the cluster has {cluster.num_gpus}; "
                          f"raise --num-gpus or lower tp/pp/dp/replicas")
    if plan.lora_adapters:
        check_lora(model, plan.engine, plan.engine_version)
        if plan.disaggregated is not None:
            raise ConfigError("lora_adapters with disaggregated pools is not modeled; serve the adapters "
                              "from colocated replicas")
    dis = plan.disaggregated
    if dis is None:
        return [_pool("both", plan.replicas * plan.dp, model, cluster, plan, workload, offline)]
    pools = []
    for role, gpus, tp in (("prefill", dis.prefill_gpus, dis.prefill_tp), ("decode", dis.decode_gpus, dis.decode_tp)):
        if gpus is None:  # a phase pool: that side is not deployed
            continue
        sub = plan.model_copy(update={"tp": tp, "disaggregated": None})
        if gpus % (tp * plan.pp):
            raise ConfigError(f"disaggregated.{role}_gpus={gpus} is not a multiple of {role}_tp x pp = {tp * plan.pp}")
        pools.append(_pool(role, gpus // (tp * plan.pp), model, cluster, sub, workload, offline))
    return pools


def with_site(engine: EngineConstants, gpu: str) -> tuple[EngineConstants, float]:
    """The engine constants and device-time multiplier of the active site profile
    (meshplan.calibration.site): the engine's host time per step and per request, and this GPU's device
    time."""
    site = active_site()
    if site is None:
        return engine, 1.0
    step = site.factor("serving", "step")
    engine = replace(engine, iteration_s=engine.iteration_s * step, per_seq_s=engine.per_seq_s * step)
    return engine, site.factor("serving", "device", gpu)


def build_replicas(model: ModelSpec, cluster: Cluster, pool: Pool, workload: Workload,
                   log: IterationLog, first_index: int, engine: EngineConstants | None = None) -> list[Replica]:
    """Fresh replicas of `pool`, numbered from `first_index`, sharing one cost model."""
    plan, mem = pool.plan, pool.memory
    sub = Cluster(gpu=cluster.gpu, num_gpus=plan.gpus_per_replica, gpus_per_node=cluster.gpus_per_node,
                  scale_up_domain=cluster.scale_up_domain,
                  inter_node_bandwidth_bytes_per_s_per_gpu=cluster.inter_node_bandwidth_bytes_per_s_per_gpu,
                  power_limit_w=cluster.power_limit_w)
    key = constants_key(plan.engine, plan.engine_version)
    engine = engine or engine_constants(key)
    stage = Counter(stage_layers(model, plan.pp))
    tbo = pool.defaults.two_batch_overlap if plan.enable_two_batch_overlap is None else plan.enable_two_batch_overlap
    graphs = graph_policy(key, pool.defaults.cuda_graph_max_batch, stage, plan.tp, plan.ep, plan.enforce_eager,
                          _prefill_graph_tokens(pool, model, cluster, tbo))
    engine, device = with_site(engine, cluster.gpu.name)
    cost = IterationCost(model, sub, plan, mem.kv, engine, graphs, device_scale=device, two_batch_overlap=tbo,
                         two_batch_above=pool.defaults.two_batch_above_tokens)
    window = -(-int(mem.kv.windowed_bytes_per_request) // int(mem.kv.bytes_per_token * mem.block_size))
    caching = pool.defaults.prefix_caching if plan.prefix_caching is None else plan.prefix_caching
    replicas = [Replica(first_index + i, pool.scheduler,
                        BlockPool(mem.num_blocks, mem.block_size, workload.hash_block_tokens, caching),
                        cost, log, role=pool.role, window_blocks=window)
                for i in range(pool.replicas)]
    if plan.kv_offload == "cpu":
        link = host_for(cluster.gpu.name).link_bytes_per_s
        unit = replicas[0].pool.hash_tokens
        units = capacity_units(plan.kv_cpu_bytes or 0.0, plan.gpus_per_replica, mem.kv.bytes_per_token, unit)
        for replica in replicas:
            replica.cpu = CpuTier(units, plan.kv_hit_rate, mem.kv.bytes_per_token / link)
    if plan.lora_adapters:
        size = adapter_bytes(list(stage_layers(model, plan.pp)), model, plan.tp, plan.lora_rank)
        load_s = load_seconds(size, host_for(cluster.gpu.name).link_bytes_per_s)
        for replica in replicas:
            replica.lora = AdapterSlots(lora_slots(plan), load_s)
    return replicas


def _prefill_graph_tokens(pool: Pool, model: ModelSpec, cluster: Cluster, two_batch: bool) -> int:
    """Largest prefill batch the pool's engine replays from prefill CUDA graphs (SGLang from
    0.5.10; engine_defaults.yaml, prefill_cuda_graph_max_tokens), 0 where its release or the
    deployment (pipeline stages, two-batch overlap, DeepEP, a disaggregated role) turns them off."""
    d, plan = pool.defaults, pool.plan
    off = {"pipeline_parallel": plan.pp > 1, "two_batch_overlap": two_batch,
           "deepep": uses_deepep(plan.engine, plan.ep, cluster), "disaggregated": pool.role != "both"}
    if not d.prefill_graph_max_tokens or any(off[why] for why in d.prefill_graph_off_with):
        return 0
    mla = any(layer.attention.mla is not None for layer in model.layers)
    return d.prefill_graph_mla_cap if mla else d.prefill_graph_max_tokens
