"""Invariants of the serving simulator over a grid of small scenarios.

Engines (vLLM, SGLang, TensorRT-LLM) x arrivals (offline, Poisson, gamma burstiness 0.5,
closed-loop concurrency) x lengths (fixed, random, ShareGPT), plus shared prefixes with and
without prefix caching, a KV cache of a few thousand tokens that forces preemption, speculative
decoding, pp=2, two replicas under each router policy and prefill/decode disaggregation.

Each scenario is simulated once per module with `Replica.start` and `Replica.finish` wrapped to
check the KV block accounting after every call; the tests then read the records and the log.
A few exact checks compare latencies with the cost model evaluated independently.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from meshplan.serving.engine.iterations import TRANSFER
import pytest

import meshplan
from meshplan.errors import ConfigError
from meshplan.serving.engine.deployment import resolve_pools
from meshplan.serving.engine.kvcache import BlockPool
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.engine.replica import Replica
from meshplan.serving.simulate import Simulation, SimulationResult, simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

ENGINES = ("vllm", "sglang", "tensorrt-llm")
GPU = "h100-sxm-80gb"
TINY_KV_TOKENS = 3000
"""KV cache of the preemption scenarios: a few requests of ~800 tokens at a time."""


@functools.cache
def model(name: str = "llama-3.1-8b"):
    return meshplan.load_model(name)


@functools.cache
def cluster(num_gpus: int):
    return meshplan.Cluster.build(GPU, num_gpus)


@dataclass(frozen=True)
class Scenario:
    id: str
    plan: dict
    spec: dict
    gpus: int = 1
    model: str = "llama-3.1-8b"
    kv_tokens: int | None = None
    """Set gpu_memory_utilization so each replica's KV cache holds about this many tokens."""
    preempts: bool = False
    """The scenario is meant to preempt (checked by test_preemption_scenarios_preempt)."""
    seed: int = 0
    tags: tuple[str, ...] = field(default=())


def utilization_for_kv_tokens(model_name: str, gpus: int, plan: dict, tokens: int) -> float:
    """gpu_memory_utilization leaving ~`tokens` of KV cache (vLLM/SGLang: a share of the whole
    GPU; TensorRT-LLM: a share of what weights, activations and runtime leave)."""
    workload = synthesize(WorkloadSpec(num_requests=1), 0)
    pool = resolve_pools(model(model_name), cluster(gpus),
                         ServingPlan(**plan, gpu_memory_utilization=1.0), workload)[0]
    mem, hbm = pool.memory, cluster(gpus).gpu.hbm_bytes
    kv = tokens * mem.kv.bytes_per_token
    if pool.defaults.memory_fraction_of == "total":
        return (mem.weights_bytes + mem.activation_bytes + mem.reserved_bytes + kv) / hbm
    return kv / mem.kv_bytes


def _plan(s: Scenario) -> ServingPlan:
    fields_ = dict(s.plan)
    if s.kv_tokens is not None:
        base = {k: v for k, v in fields_.items() if k != "disaggregated"}
        fields_["gpu_memory_utilization"] = utilization_for_kv_tokens(s.model, s.gpus, base, s.kv_tokens)
    return ServingPlan(**fields_)


# ---------------------------------------------------------------------------- the grid

ARRIVALS = {
    "offline": {},
    "poisson": {"arrival": "poisson", "request_rate": 20.0},
    "gamma": {"arrival": "gamma", "request_rate": 20.0, "burstiness": 0.5},
    "concurrency": {"arrival": "concurrency", "concurrency": 16},
}
LENGTHS = {
    "fixed": {"dataset": "fixed", "input_len": 512, "output_len": 64},
    "random": {"dataset": "random", "input_len": 512, "output_len": 64, "range_ratio": 0.5},
    "sharegpt": {"dataset": "sharegpt"},
}
POISSON_RANDOM = {**ARRIVALS["poisson"], **LENGTHS["random"]}
LONG_OUTPUT = {"dataset": "random", "input_len": 512, "output_len": 256, "range_ratio": 0.5}
SHARED = {"shared_prefix_len": 1024, "num_prefixes": 3}
DISAGG = Disaggregation(prefill_gpus=1, decode_gpus=1)
SPEC = {"speculative_tokens": 2, "acceptance_rate": 0.7}


def _engine_scenarios(e: str) -> list[Scenario]:
    # TensorRT-LLM's default guaranteed-no-evict never preempts; max-utilization does.
    evict = {"scheduler_policy": "max-utilization"} if e == "tensorrt-llm" else {}
    out = [Scenario(f"{e}-{a}-{n}", {"engine": e}, {"num_requests": 200, **arr, **lengths})
           for a, arr in ARRIVALS.items() for n, lengths in LENGTHS.items()]
    out += [
        Scenario(f"{e}-shared-prefix-cached", {"engine": e, "prefix_caching": True},
                 {"num_requests": 300, **POISSON_RANDOM, **SHARED}),
        Scenario(f"{e}-shared-prefix-uncached", {"engine": e, "prefix_caching": False},
                 {"num_requests": 300, **POISSON_RANDOM, **SHARED}),
        Scenario(f"{e}-tiny-kv", {"engine": e, **evict}, {"num_requests": 120, **LONG_OUTPUT},
                 kv_tokens=TINY_KV_TOKENS, preempts=True),
        Scenario(f"{e}-tiny-kv-shared-prefix", {"engine": e, "prefix_caching": True, **evict},
                 {"num_requests": 120, **ARRIVALS["poisson"], **LONG_OUTPUT, "input_len": 256,
                  "shared_prefix_len": 512, "num_prefixes": 2},
                 kv_tokens=TINY_KV_TOKENS, preempts=True),
        # SGLang admits a request only with room for its whole prompt and output (PrefillAdder),
        # which at 120 requests leaves its speculative decodes room enough: no preemption there.
        Scenario(f"{e}-tiny-kv-speculative", {"engine": e, **SPEC, **evict},
                 {"num_requests": 120, **LONG_OUTPUT}, kv_tokens=TINY_KV_TOKENS, preempts=e != "sglang"),
        # Sliding-window layers hold a whole window per request: admission-bound, 2 at a time.
        Scenario(f"{e}-tight-kv-windowed-gemma2", {"engine": e, **evict},
                 {"num_requests": 100, **LONG_OUTPUT}, model="gemma-2-9b", kv_tokens=12_000),
        Scenario(f"{e}-speculative", {"engine": e, **SPEC}, {"num_requests": 300, **POISSON_RANDOM}),
        Scenario(f"{e}-pp2", {"engine": e, "pp": 2}, {"num_requests": 300, **POISSON_RANDOM}, gpus=2),
        Scenario(f"{e}-pp2-tiny-kv", {"engine": e, "pp": 2, **evict}, {"num_requests": 120, **LONG_OUTPUT},
                 gpus=2, kv_tokens=TINY_KV_TOKENS, preempts=True),
        Scenario(f"{e}-disaggregated", {"engine": e, "disaggregated": DISAGG},
                 {"num_requests": 300, **POISSON_RANDOM}, gpus=2),
        Scenario(f"{e}-disaggregated-shared-prefix", {"engine": e, "disaggregated": DISAGG},
                 {"num_requests": 300, **POISSON_RANDOM, **SHARED}, gpus=2),
        Scenario(f"{e}-disaggregated-tiny-kv", {"engine": e, "disaggregated": DISAGG, **evict},
                 {"num_requests": 120, **LONG_OUTPUT}, gpus=2, kv_tokens=TINY_KV_TOKENS, preempts=True),
    ]
    out += [Scenario(f"{e}-replicas2-{router}", {"engine": e, "replicas": 2, "router": router},
                     {"num_requests": 300, **POISSON_RANDOM, **SHARED}, gpus=2)
            for router in ("round-robin", "least-outstanding", "prefix-affinity")]
    return out


SCENARIOS = {s.id: s for e in ENGINES for s in _engine_scenarios(e)}
SCENARIOS["tensorrt-llm-tiny-kv-no-evict"] = Scenario(
    "tensorrt-llm-tiny-kv-no-evict", {"engine": "tensorrt-llm", "scheduler_policy": "guaranteed-no-evict"},
    {"num_requests": 120, **LONG_OUTPUT}, kv_tokens=TINY_KV_TOKENS)
SCENARIOS["vllm-multi-turn-prefix-affinity"] = Scenario(
    "vllm-multi-turn-prefix-affinity", {"engine": "vllm", "replicas": 2, "router": "prefix-affinity"},
    {"num_requests": 200, **POISSON_RANDOM, "turns": 4, "think_time_s": 1.0}, gpus=2)
PREEMPTING = [s for s in SCENARIOS.values() if s.preempts]


# ---------------------------------------------------------------------------- one audited run

@dataclass
class Run:
    scenario: Scenario
    sim: Simulation
    result: SimulationResult
    workload: object
    checks: int
    """KV accounting checks made (one after every start and finish)."""
    violations: list[str]


def _audited(s: Scenario) -> Run:
    """Simulate `s` with the KV block accounting checked after every start and finish."""
    workload = synthesize(WorkloadSpec(**s.spec), seed=s.seed)
    sim = Simulation(model(s.model), cluster(s.gpus), _plan(s), workload)
    violations: list[str] = []
    checks = 0
    start, finish = Replica.start, Replica.finish

    def audit(replica: Replica, where: str, now: float) -> None:
        nonlocal checks
        checks += 1
        p = replica.pool
        if p.free + p.private + p.cached != p.total or p.free < 0 or p.private < 0:
            violations.append(f"replica {replica.index} after {where} at t={now:.6f}: free {p.free} + "
                              f"private {p.private} + cached {p.cached} vs total {p.total}")

    def audited_start(self, now):
        end = start(self, now)
        audit(self, "start", now)
        return end

    def audited_finish(self, end):
        finish(self, end)
        audit(self, "finish", end)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Replica, "start", audited_start)
        mp.setattr(Replica, "finish", audited_finish)
        # every iteration through start/finish, so each is audited (the fast-forward that runs
        # pure-decode steps in place is checked equal to this path in tests/test_serving_skip.py)
        mp.setattr(Replica, "skip_decodes", lambda self, now, horizon: (now, 0))
        result = sim.run()
    return Run(s, sim, result, workload, checks, violations)


_RUNS: dict[str, Run] = {}


def run_of(scenario_id: str) -> Run:
    if scenario_id not in _RUNS:
        _RUNS[scenario_id] = _audited(SCENARIOS[scenario_id])
    return _RUNS[scenario_id]


def replicas(run: Run) -> list[Replica]:
    return [r for group in run.sim.groups for r in group]


grid = pytest.mark.parametrize("sid", list(SCENARIOS))


# ---------------------------------------------------------------------------- properties

@grid
def test_every_request_finishes_exactly_once(sid):
    run = run_of(sid)
    ids = [r.id for r in run.result.records]
    assert len(ids) == len(set(ids)), "a request finished twice"
    assert sorted(ids) == list(range(len(run.workload))), "requests are missing"
    assert run.result.metrics.completed == len(run.workload)
    for rep in replicas(run):
        assert not rep.waiting and not rep.running and not rep.prefilling and rep.decode.count == 0
        assert not rep.busy


@grid
def test_token_times_follow_each_request(sid):
    run = run_of(sid)
    for r in run.result.records:
        t = r.token_times_s
        assert len(t) == r.output_len, f"request {r.id}"
        assert np.all(np.diff(t) >= 0), f"request {r.id}: token times go back"
        assert t[0] == r.first_token_s and t[-1] == r.finish_s, f"request {r.id}"
        assert r.arrival_s <= r.first_token_s <= r.finish_s, f"request {r.id}"


@grid
def test_tokens_are_conserved(sid):
    run = run_of(sid)
    records, log, w = run.result.records, run.result.log, run.workload
    assert sum(r.output_len for r in records) == w.total_output_tokens
    assert run.result.metrics.total_output_tokens == w.total_output_tokens
    assert sum(r.input_len for r in records) == w.total_input_tokens
    prefilled = int(log.column("prefill_tokens").sum())
    cached = sum(r.cached_tokens for r in records)
    preempted = int(log.column("preempted").sum())
    assert preempted == sum(r.preemptions for r in records)
    # Recompute after a preemption can only add prefill work; without one it is exact.
    assert prefilled >= w.total_input_tokens - cached
    if preempted == 0:
        assert prefilled == w.total_input_tokens - cached
    for r in records:  # a recompute may find the whole original prompt cached
        assert 0 <= r.cached_tokens <= r.input_len - (r.preemptions == 0), f"request {r.id}"


@grid
def test_kv_blocks_balance_at_every_step(sid):
    run = run_of(sid)
    assert run.checks >= 2 * run.result.iterations
    assert run.violations == [], run.violations[:3]
    for rep in replicas(run):
        pool = rep.pool
        assert pool.used == 0 and pool.private == 0, f"replica {rep.index} leaks blocks"
        assert pool.free + pool.cached == pool.total
    log = run.result.log
    assert np.all(log.column("kv_used_blocks") <= log.column("kv_total_blocks"))
    assert np.all(log.column("kv_used_blocks") >= 0)


@grid
def test_clock_never_goes_back(sid):
    run = run_of(sid)
    log = run.result.log
    engine = log.column("kind") != TRANSFER  # KV transfers overlap iterations by design
    assert int(engine.sum()) == run.result.iterations
    assert np.all(log.column("start_s") <= log.column("end_s"))
    for rep in log.replicas():
        mine = engine[log.column("replica") == rep]
        start, end = log.column("start_s", rep)[mine], log.column("end_s", rep)[mine]
        assert np.all(start[1:] >= end[:-1]), f"replica {rep}: iterations overlap or are out of order"
    assert run.result.simulated_s == pytest.approx(max(r.finish_s for r in run.result.records))


@pytest.mark.parametrize("sid", [s.id for s in PREEMPTING])
def test_preemption_scenarios_preempt(sid):
    run = run_of(sid)
    assert int(run.result.log.column("preempted").sum()) > 0
    assert any(r.preemptions > 0 for r in run.result.records)
    assert run.result.metrics.preemptions > 0


def test_guaranteed_no_evict_never_preempts_on_a_tiny_cache():
    run = run_of("tensorrt-llm-tiny-kv-no-evict")
    assert int(run.result.log.column("preempted").sum()) == 0
    assert max(int(u) for u in run.result.log.column("kv_used_blocks")) > 0


# ---------------------------------------------------------------------------- determinism

def _record_rows(result: SimulationResult) -> list[tuple]:
    return [(r.id, r.arrival_s, r.input_len, r.output_len, r.replica, r.cached_tokens,
             r.first_token_s, r.finish_s, r.preemptions, tuple(r.token_times_s.tolist()))
            for r in result.records]


def _simulate(s: Scenario, seed: int) -> SimulationResult:
    workload = synthesize(WorkloadSpec(**s.spec), seed=seed)
    return simulate(model(s.model), cluster(s.gpus), _plan(s), workload)


@pytest.mark.parametrize("sid", ["vllm-gamma-random", "sglang-poisson-sharegpt",
                                 "tensorrt-llm-concurrency-random", "vllm-tiny-kv",
                                 "sglang-disaggregated", "tensorrt-llm-replicas2-least-outstanding"])
def test_same_seed_same_result_other_seed_differs(sid):
    s = SCENARIOS[sid]
    a, b, c = _simulate(s, 1), _simulate(s, 1), _simulate(s, 2)
    assert a.metrics.to_dict() == b.metrics.to_dict()
    assert _record_rows(a) == _record_rows(b)
    assert a.log.columns().keys() == b.log.columns().keys()
    assert all(np.array_equal(x, y) for x, y in zip(a.log.columns().values(), b.log.columns().values()))
    assert a.metrics.to_dict() != c.metrics.to_dict()
    assert _record_rows(a) != _record_rows(c)


# ---------------------------------------------------------------------------- exact latencies

@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("engine", ENGINES)
def test_one_request_at_a_time_matches_the_cost_model(engine, pp):
    """Closed loop with one client: TTFT is one prefill iteration of the whole prompt, and
    every later token is one batch-1 decode step whose context grows by one each step."""
    n_in, n_out = 512, 64
    workload = synthesize(WorkloadSpec(arrival="concurrency", concurrency=1, num_requests=3,
                                       dataset="fixed", input_len=n_in, output_len=n_out), 0)
    sim = Simulation(model(), cluster(pp), ServingPlan(engine=engine, pp=pp), workload)
    result = sim.run()
    cost = sim.groups[0][0].cost
    pairs = float(sum(range(1, n_in + 1)))  # causal (query, key) pairs of the prompt
    prefill = cost(n_in, 1, 0, 0.0, n_in, pairs, 1)
    steps = np.array([cost(1, 1, 1, float(n_in + j), 0, 0.0, 1) for j in range(n_out - 1)])
    assert len(result.records) == 3
    for r in result.records:
        assert r.ttft_s == pytest.approx(prefill, rel=1e-9)
        assert r.tpot_s == pytest.approx(steps.mean(), rel=1e-9)
        assert np.diff(r.token_times_s) == pytest.approx(steps, rel=1e-6)
    assert result.metrics.ttft_ms.mean == pytest.approx(prefill * 1e3, rel=1e-9)
    assert result.metrics.tpot_ms.mean == pytest.approx(steps.mean() * 1e3, rel=1e-9)
    assert result.metrics.itl_ms.p50 == pytest.approx(np.median(steps) * 1e3, rel=1e-6)
    prefill_rows = result.log.column("prefill_tokens")
    assert sorted(prefill_rows[prefill_rows > 0].tolist()) == [n_in] * 3


# ---------------------------------------------------------------------------- prefix caching

@pytest.mark.parametrize("engine", ENGINES)
def test_prefix_caching_reuses_a_long_shared_prefix(engine):
    spec = WorkloadSpec(num_requests=200, arrival="poisson", request_rate=10.0, dataset="fixed",
                        input_len=128, output_len=32, shared_prefix_len=2048)
    workload = synthesize(spec, 0)
    on = simulate(model(), cluster(1), ServingPlan(engine=engine, prefix_caching=True), workload)
    off = simulate(model(), cluster(1), ServingPlan(engine=engine, prefix_caching=False), workload)
    hits = [r.cached_tokens for r in on.records]
    assert np.mean([h > 0 for h in hits]) > 0.9
    assert max(hits) <= 2048  # only the shared system prompt is ever cached
    assert all(r.cached_tokens == 0 for r in off.records)
    assert on.metrics.prefix_cache_hit_rate > 0.8
    assert on.metrics.ttft_ms.mean < 0.5 * off.metrics.ttft_ms.mean


def test_prefix_units_span_whole_kv_blocks():
    """A cached unit covers lcm(hash block, KV block) tokens, so converting a request's private
    blocks into cached units never takes more blocks than it holds (TRT-LLM: 32-token blocks
    under 16-token prefix hashes)."""
    pool = BlockPool(100, block_size=32, hash_block_tokens=16, caching=True)
    assert (pool.hash_tokens, pool.unit_blocks) == (32, 1)
    assert pool.units((11, 12, 13, 14, 15)) == (12, 14)
    same = BlockPool(100, block_size=16, hash_block_tokens=16, caching=True)
    assert (same.hash_tokens, same.unit_blocks, same.units((1, 2))) == (16, 1, (1, 2))
    pages = BlockPool(100, block_size=1, hash_block_tokens=16, caching=True)
    assert (pages.hash_tokens, pages.unit_blocks) == (16, 16)
    odd = BlockPool(1000, block_size=24, hash_block_tokens=512, caching=True)
    assert (odd.hash_tokens, odd.unit_blocks) == (1536, 64)


# ---------------------------------------------------------------------------- requests that can never run

@pytest.mark.parametrize("engine", ENGINES)
def test_a_request_larger_than_the_kv_cache_is_an_error(engine):
    plan = {"engine": engine}
    util = utilization_for_kv_tokens("llama-3.1-8b", 1, plan, TINY_KV_TOKENS)
    workload = synthesize(WorkloadSpec(num_requests=3, dataset="fixed", input_len=4000, output_len=8), 0)
    with pytest.raises(ConfigError):
        simulate(model(), cluster(1), ServingPlan(**plan, gpu_memory_utilization=util), workload)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_prompt_over_the_token_budget_without_chunking_is_an_error(engine):
    plan = ServingPlan(engine=engine, chunked_prefill=False, max_num_batched_tokens=1024, max_num_seqs=64)
    workload = synthesize(WorkloadSpec(num_requests=3, dataset="fixed", input_len=2000, output_len=8), 0)
    with pytest.raises(ConfigError):
        simulate(model(), cluster(1), plan, workload)


def test_grid_covers_the_requested_dimensions():
    ids = set(SCENARIOS)
    for e in ENGINES:
        for a in ARRIVALS:
            for n in LENGTHS:
                assert f"{e}-{a}-{n}" in ids
    assert {s.plan.get("router") for s in SCENARIOS.values()} >= {"round-robin", "least-outstanding",
                                                                  "prefix-affinity"}


def test_disaggregated_log_records_kv_transfers():
    run = run_of("vllm-disaggregated")
    assert "transfer" in set(run.result.log.kinds().tolist())
