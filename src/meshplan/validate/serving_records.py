"""Turn a serving run record into the (model, cluster, plan, workload) meshplan simulates,
and predict its measured metrics with the simulator."""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.serving.cost.constants import version_note
from meshplan.serving.engine.layout import choose_layout
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import TABLE_KINDS, Workload, WorkloadSpec, synthesize
from meshplan.validate.records import record_model
from meshplan.validate.schema import Record

SERVING_METRICS = ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "ttft_ms_mean",
                   "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99",
                   "itl_ms_p50", "e2e_ms_mean", "input_tokens_per_s")
"""Measured serving keys the simulator predicts (max_request_rate_under_slo needs the
capacity search of `serve plan`)."""

MAX_REQUESTS = 4000
"""Offline records are simulated on at most this many requests: throughput of fixed-length
offline runs reaches its steady state long before (the tail of the last batch is < 2%)."""
MAX_REPLICA_REQUESTS = 20_000
"""Timed-arrival records (poisson, gamma) are simulated on at most this many requests per
replica: a benchmark that ran for minutes at a high rate holds thousands of requests in flight,
which a 1,000-request simulation never reaches (it would measure the ramp-up and the drain)."""
TIMED = ("poisson", "gamma")


@dataclass(frozen=True, slots=True)
class ServingCase:
    """Everything meshplan needs to simulate one serving record."""

    record: Record
    model: ModelSpec
    cluster: Cluster
    plan: ServingPlan
    workload: Workload
    notes: tuple[str, ...] = ()
    """What was chosen for the record because it did not say (layout, engine release)."""


ENGINE_KNOBS = ("router", "block_size", "gpu_memory_utilization", "scheduler_policy", "enforce_eager",
                "num_scheduler_steps")
"""Record keys handed to the ServingPlan field of the same name when stated (null: the default)."""


def _kv_dtype(s) -> str:
    """KV dtype as published; unpublished with fp8/fp4 TensorRT-LLM checkpoints: fp8 (ModelOpt
    quantized checkpoints ship an fp8 KV-cache scale), else the activation dtype."""
    if s.kv_cache_dtype:
        return s.kv_cache_dtype if s.kv_cache_dtype in ("bf16", "fp16", "fp8") else "auto"
    if s.engine == "tensorrt-llm" and s.weights_dtype in ("fp8", "fp4"):
        return "fp8"
    return "auto"


def _plan(record: Record, model: ModelSpec) -> ServingPlan:
    s, hw = record.serving, record.hardware
    tp, pp, dp = s.tp or 1, s.pp or 1, s.dp or 1
    ep = s.ep or (tp * dp if model.is_moe and dp > 1 else 1)
    replicas = s.replicas or max(1, hw.num_gpus // (tp * pp * dp))
    static = s.engine == "tensorrt-llm" and s.max_num_seqs and s.workload.num_requests == s.max_num_seqs
    budget = s.max_num_batched_tokens
    if static and not budget:  # one static batch: the whole batch's prompts in one step
        budget = s.max_num_seqs * (s.workload.input_len or 1)
    dis = Disaggregation(**s.disaggregated.model_dump(exclude_none=True)) if s.disaggregated else None
    knobs = {k: getattr(s, k) for k in ENGINE_KNOBS if getattr(s, k) is not None}
    return ServingPlan(engine="vllm" if s.engine == "other" else s.engine,
                       engine_version=s.engine_version, tp=tp, pp=pp, ep=ep, dp=dp,
                       replicas=replicas, weights_dtype=s.weights_dtype or "auto",
                       kv_cache_dtype=_kv_dtype(s), max_num_seqs=s.max_num_seqs,
                       max_num_batched_tokens=budget, chunked_prefill=s.chunked_prefill,
                       prefix_caching=s.prefix_caching, disaggregated=dis,
                       enable_two_batch_overlap=s.enable_two_batch_overlap, **knobs, **_speculative(s))


def _speculative(s) -> dict:
    """The plan fields of the record's `speculative` block; none when it has none."""
    spec = s.speculative
    if spec is None:
        return {}
    return {"speculative_method": spec.method, "speculative_tokens": spec.tokens,
            "acceptance_rate": spec.probability}


def _workload(record: Record, seed: int) -> Workload:
    w = record.serving.workload
    if w.output_len is None and w.dataset not in TABLE_KINDS:
        raise ConfigError("serving.workload.output_len is not published (needed to simulate)")
    n = w.num_requests or 1000
    if w.mode == "offline":
        n = min(n, MAX_REQUESTS)
    elif w.mode in TIMED:
        n = min(n, MAX_REPLICA_REQUESTS * (record.serving.replicas or record.hardware.num_gpus))
    dataset = w.dataset or "fixed"
    spec = WorkloadSpec(arrival=w.mode, request_rate=w.request_rate, burstiness=w.burstiness,
                        concurrency=w.concurrency, num_requests=n, dataset=dataset,
                        input_len=w.input_len, output_len=w.output_len,
                        range_ratio=w.range_ratio or 0.0, histogram=w.histogram)
    return synthesize(spec, seed=seed)


def layout_unstated(record: Record) -> bool:
    """Whether the record gives only a GPU count: no tp, pp, ep, dp, replicas or
    disaggregated pools (SCHEMA.md: a missing layout is chosen, not fatal)."""
    s = record.serving
    return all(v is None for v in (s.tp, s.pp, s.ep, s.dp, s.replicas, s.disaggregated))


def serving_case(record: Record, seed: int = 0) -> ServingCase:
    """The model, cluster, plan and workload a serving record describes; a layout the record
    leaves out is chosen (serving.engine.layout) and said in `notes`."""
    model = record_model(record)
    cluster = Cluster.build(**record.hardware.model_dump())
    plan, workload = _plan(record, model), _workload(record, seed)
    notes = [n for n in (version_note(plan.engine, plan.engine_version),) if n]
    if layout_unstated(record):
        plan, note = choose_layout(model, cluster, plan, workload)
        notes.append(note)
    return ServingCase(record, model, cluster, plan, workload, tuple(notes))


def one_replica(case: ServingCase) -> tuple[ServingCase, int]:
    """A timed-arrival record as its first replica alone, and the replica count: round-robin
    hands replica 0 requests 0, R, 2R, ... of an aggregated deployment's R independent replicas,
    so it sees exactly that share (at most MAX_REPLICA_REQUESTS of it) and the deployment's
    throughput is R times its own. Other records are returned as they are, with 1."""
    plan = case.plan
    if (case.record.serving.workload.mode not in TIMED or plan.disaggregated is not None
            or plan.router != "round-robin"):
        return case, 1
    share = case.workload.requests[::plan.replicas][:MAX_REPLICA_REQUESTS]
    requests = [replace(r, id=i) for i, r in enumerate(share)]
    return replace(case, plan=plan.model_copy(update={"replicas": 1}),
                   workload=replace(case.workload, requests=requests)), plan.replicas


THROUGHPUTS = ("output_tokens_per_s", "total_tokens_per_s", "input_tokens_per_s", "requests_per_s")


def predict_serving(case: ServingCase, engine=None) -> dict[str, float]:
    """Simulated values of every serving metric the record could carry."""
    case, replicas = one_replica(case)
    m = simulate(case.model, case.cluster, case.plan, case.workload, engine=engine).metrics
    out = _metric_values(m)
    return {k: v * replicas if k in THROUGHPUTS else v for k, v in out.items()}


def _metric_values(m) -> dict[str, float]:
    return {"output_tokens_per_s": m.output_tokens_per_s, "total_tokens_per_s": m.total_tokens_per_s,
            "input_tokens_per_s": m.input_tokens_per_s,
            "requests_per_s": m.requests_per_s, "ttft_ms_mean": m.ttft_ms.mean,
            "ttft_ms_p50": m.ttft_ms.p50, "ttft_ms_p99": m.ttft_ms.p99, "tpot_ms_mean": m.tpot_ms.mean,
            "tpot_ms_p50": m.tpot_ms.p50, "tpot_ms_p99": m.tpot_ms.p99, "itl_ms_p50": m.itl_ms.p50,
            "e2e_ms_mean": m.e2e_ms.mean}
