"""Synthetic serving workloads: length distributions, arrival processes, prefix hashes, checks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from meshplan.errors import ConfigError
from meshplan.serving.traffic.lengths import sample_lengths, sharegpt_table, uniform_range
from meshplan.serving.traffic.workload import WorkloadSpec, block_hashes, synthesize


def _lengths(kind: str, n: int = 20_000, seed: int = 0, **kw):
    return sample_lengths(kind, n, np.random.default_rng(seed), **kw)


def _gaps(spec: WorkloadSpec, seed: int = 0) -> np.ndarray:
    arrivals = np.array([r.arrival_s for r in synthesize(spec, seed).requests])
    return np.diff(arrivals)


# --- lengths -------------------------------------------------------------------------------

def test_fixed_lengths():
    inputs, outputs = _lengths("fixed", 100, input_len=321, output_len=7)
    assert set(inputs.tolist()) == {321} and set(outputs.tolist()) == {7}


def test_random_range_bounds_and_mean():
    # vLLM convention: uniform integers on [floor(L(1-r)), ceil(L(1+r))], both ends included.
    inputs, outputs = _lengths("random", input_len=1000, output_len=200, range_ratio=0.25)
    assert inputs.min() == 750 and inputs.max() == 1250
    assert outputs.min() == 150 and outputs.max() == 250
    # Uniform on 501 values: std 145, so the mean of 20k draws is within 1 token (1 sigma).
    assert abs(inputs.mean() - 1000) < 5 and abs(outputs.mean() - 200) < 1


def test_random_range_ratio_zero_is_fixed_and_float_slack():
    inputs, _ = _lengths("random", 500, input_len=777, output_len=5, range_ratio=0.0)
    assert set(inputs.tolist()) == {777}
    draws = uniform_range(100, 0.1)(5000, np.random.default_rng(1))
    assert draws.min() == 90 and draws.max() == 110  # not 111 from 100 * 1.1 = 110.00000000000001


def test_normal_and_lognormal_clip_and_match_moments():
    inputs, _ = _lengths("normal", input_len=100, output_len=10, input_std=80, output_std=5, max_len=200)
    assert inputs.min() >= 1 and inputs.max() <= 200
    logs, _ = _lengths("lognormal", 100_000, input_len=300, output_len=50, input_std=150,
                       output_std=10, max_len=100_000)
    # Mean and std of the lengths themselves (not of their logs), within 2%.
    assert logs.mean() == pytest.approx(300, rel=0.02) and logs.std() == pytest.approx(150, rel=0.02)


def test_sharegpt_means_match_the_data_file():
    table = sharegpt_table()
    assert table.implied_input_mean == pytest.approx(161.31, rel=0.005)  # vLLM paper, Fig. 11
    assert table.implied_output_mean == pytest.approx(337.99, rel=0.005)
    inputs, outputs = _lengths("sharegpt", 100_000)
    # Standard errors are about 0.5% of the means; 3% leaves room for the rounding to tokens.
    assert inputs.mean() == pytest.approx(table.implied_input_mean, rel=0.03)
    assert outputs.mean() == pytest.approx(table.implied_output_mean, rel=0.03)
    assert (inputs + outputs).max() <= 4096 and inputs.min() >= 4 and outputs.min() >= 4


def test_sharegpt_clipping_and_correlation():
    inputs, outputs = _lengths("sharegpt", 20_000, max_len=512)
    assert (inputs + outputs).max() <= 512
    inputs, outputs = _lengths("sharegpt", 50_000)
    rho = stats.spearmanr(inputs, outputs).statistic
    assert rho > 0 and rho == pytest.approx(sharegpt_table().spearman, abs=0.03)


def test_length_dispatcher_errors():
    with pytest.raises(ConfigError, match="input_std"):
        _lengths("normal", 10, input_len=10, output_len=10)
    with pytest.raises(ConfigError, match="valid: fixed, random"):
        _lengths("zipf", 10)


# --- arrivals ------------------------------------------------------------------------------

def test_poisson_mean_interarrival():
    spec = WorkloadSpec(arrival="poisson", request_rate=5.0, num_requests=20_000, dataset="fixed",
                        input_len=8, output_len=8)
    gaps = _gaps(spec)
    # Exponential gaps: the mean of 20k is within 0.7% (1 sigma) of 1/rate; allow 3%.
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_sets_coefficient_of_variation():
    spec = WorkloadSpec(arrival="gamma", request_rate=4.0, burstiness=0.25, num_requests=40_000,
                        dataset="fixed", input_len=8, output_len=8)
    gaps = _gaps(spec, seed=3)
    # Gamma(k) gaps have CV 1/sqrt(k) = 2; over 30 seeds the CV of 20k gaps spread by 1% (1 sigma).
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)
    assert gaps.mean() == pytest.approx(0.25, rel=0.05)


def test_offline_and_concurrency_arrive_at_zero():
    offline = synthesize(WorkloadSpec(num_requests=50, dataset="fixed", input_len=4, output_len=4))
    assert all(r.arrival_s == 0 for r in offline.requests) and offline.concurrency is None
    closed = synthesize(WorkloadSpec(arrival="concurrency", concurrency=8, num_requests=50))
    assert all(r.arrival_s == 0 for r in closed.requests) and closed.concurrency == 8


def test_same_seed_same_workload_other_seed_differs():
    spec = WorkloadSpec(arrival="poisson", request_rate=3, num_requests=200, dataset="sharegpt",
                        shared_prefix_len=40, num_prefixes=3, turns=2, think_time_s=1.0)
    def key(w):
        return [(r.id, r.arrival_s, r.input_len, r.output_len, r.prefix_hashes, r.session) for r in w.requests]
    assert key(synthesize(spec, seed=7)) == key(synthesize(spec, seed=7))
    assert key(synthesize(spec, seed=7)) != key(synthesize(spec, seed=8))


def test_requests_sorted_numbered_and_counted():
    w = synthesize(WorkloadSpec(arrival="poisson", request_rate=10, num_requests=10, turns=3,
                                think_time_s=0.5, dataset="fixed", input_len=10, output_len=5))
    assert len(w) == 10 and [r.id for r in w.requests] == list(range(10))
    arrivals = [r.arrival_s for r in w.requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0
    assert w.total_output_tokens == 50
    assert w.total_input_tokens == sum(r.input_len for r in w.requests)


# --- prefix hashes -------------------------------------------------------------------------

def test_block_hashes_are_chained_and_stable():
    a = block_hashes([(1, 40), (2, 30)], 16)
    b = block_hashes([(1, 40), (3, 30)], 16)
    assert len(a) == 70 // 16 and a[:2] == b[:2] and all(x != y for x, y in zip(a[2:], b[2:]))
    # blake2b of packed ints: the same in every process and Python version.
    assert block_hashes([(0, 16)], 16) == (15788798083451988474,)


@pytest.mark.parametrize("prefix_len", [100, 96])
def test_shared_system_prompts_share_exactly_their_full_blocks(prefix_len):
    spec = WorkloadSpec(num_requests=60, dataset="fixed", input_len=64, output_len=4,
                        shared_prefix_len=prefix_len, num_prefixes=3)
    w = synthesize(spec, seed=2)
    shared = prefix_len // 16
    system = {}
    for r in w.requests:
        assert r.input_len == prefix_len + 64 and len(r.prefix_hashes) == (prefix_len + 64) // 16
        system.setdefault(r.prefix_hashes[:shared], []).append(r)
    assert len(system) == 3  # three distinct system prompts, each picked by some request
    groups = list(system.values())
    for group in groups:
        first = group[0].prefix_hashes
        for other in group[1:]:
            assert all(x != y for x, y in zip(first[shared:], other.prefix_hashes[shared:]))
    assert groups[0][0].prefix_hashes[0] != groups[1][0].prefix_hashes[0]


def test_no_sharing_means_no_hashes():
    w = synthesize(WorkloadSpec(num_requests=5, dataset="fixed", input_len=64, output_len=4))
    assert all(r.prefix_hashes == () and r.session is None for r in w.requests)


def test_multi_turn_prompts_extend_the_previous_turn():
    spec = WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=12, turns=3,
                        think_time_s=2.0, dataset="fixed", input_len=40, output_len=30,
                        shared_prefix_len=20)
    w = synthesize(spec, seed=5)
    sessions = {}
    for r in w.requests:
        sessions.setdefault(r.session, []).append(r)
    assert sorted(sessions) == [0, 1, 2, 3]
    for turns in sessions.values():
        assert [t.input_len for t in turns] == [60, 130, 200]  # prompt + answer + new input
        assert [t.arrival_s - turns[0].arrival_s for t in turns] == [0.0, 2.0, 4.0]
        for prev, nxt in zip(turns, turns[1:]):
            assert len(nxt.prefix_hashes) == nxt.input_len // 16
            # Full blocks inside the previous prompt keep their hashes ...
            assert nxt.prefix_hashes[:len(prev.prefix_hashes)] == prev.prefix_hashes
            # ... the block that crosses into the previous answer is new.
            assert nxt.prefix_hashes[len(prev.prefix_hashes)] not in prev.prefix_hashes
    firsts = [turns[0].prefix_hashes for turns in sessions.values()]
    assert all(h[:1] == firsts[0][:1] for h in firsts)  # one system prompt: its first block


def test_num_requests_not_a_multiple_of_turns():
    w = synthesize(WorkloadSpec(num_requests=7, turns=3, dataset="fixed", input_len=8, output_len=8))
    assert len(w) == 7 and sorted(r.session for r in w.requests) == [0, 0, 0, 1, 1, 1, 2]


# --- validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("fields, named", [
    ({"arrival": "poisson"}, "request_rate"),
    ({"arrival": "gamma", "burstiness": 0.5}, "request_rate"),
    ({"arrival": "offline", "request_rate": 2.0}, "request_rate"),
    ({"arrival": "concurrency"}, "concurrency"),
    ({"arrival": "poisson", "request_rate": 1.0, "burstiness": 0.5}, "burstiness"),
    ({"num_requests": 0}, "num_requests"),
    ({"request_rate": -1.0, "arrival": "poisson"}, "request_rate"),
    ({"dataset": "normal"}, "input_std"),
    ({"dataset": "lognormal", "input_std": 10}, "output_std"),
    ({"dataset": "fixed", "input_std": 10}, "input_std"),
    ({"dataset": "sharegpt", "input_len": 512}, "input_len"),
    ({"dataset": "fixed", "range_ratio": 0.2}, "range_ratio"),
    ({"range_ratio": 1.0}, "range_ratio"),
    ({"num_prefixes": 4}, "shared_prefix_len"),
    ({"think_time_s": 3.0}, "turns"),
    ({"dataset": "zipf"}, "dataset"),
    ({"arival": "poisson"}, "arival"),
])
def test_invalid_specs_name_the_field(fields, named):
    with pytest.raises(ConfigError, match=named):
        WorkloadSpec(**fields)


def test_none_takes_the_default():
    spec = WorkloadSpec(burstiness=None, input_len=None, range_ratio=None, request_rate=None)
    assert spec.burstiness == 1.0 and spec.input_len == 1024 and spec.range_ratio == 0.0


def test_every_field_is_documented():
    for name, info in WorkloadSpec.model_fields.items():
        assert info.description, name


@pytest.mark.parametrize("arrival", ["offline", "poisson", "gamma"])
@pytest.mark.parametrize("dataset", ["fixed", "random", "sharegpt"])
def test_single_turn_requests_equal_the_session_builder(arrival, dataset, monkeypatch):
    """One-turn sessions without a system prompt skip the session builder: same requests."""
    from meshplan.serving.traffic import workload

    spec = WorkloadSpec(arrival=arrival, request_rate=None if arrival == "offline" else 5.0,
                        dataset=dataset, num_requests=300,
                        range_ratio=0.5 if dataset == "random" else 0.0)
    fast = workload.synthesize(spec, 5).requests
    monkeypatch.setattr(workload, "_single_turns",
                        lambda spec, starts, users, outputs: workload._sessions(
                            spec, 5, starts, np.zeros(len(starts), int), users, outputs))
    assert fast == workload.synthesize(spec, 5).requests
