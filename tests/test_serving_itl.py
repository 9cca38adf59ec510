"""The ITL metric from shared decode steps (meshplan.serving.metrics.itl) and lazily built token times
(meshplan.serving.metrics.token_times) give exactly the floats of the straightforward computation:
every record's token-time array built, every gap pooled, numpy's percentile and mean."""

from __future__ import annotations

import math
import pickle
from array import array

import numpy as np
import pytest

from meshplan.serving.metrics.itl import gap_pool, weighted_percentiles
from meshplan.serving.metrics.summary import Percentiles, _itl_ms, _itl_percentiles, compute_metrics
from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.metrics.token_times import SimulatedRecord, build_token_times


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _straight(records) -> Percentiles:
    """ITL as before: pool every gap of every built token-time array."""
    return Percentiles._of_scratch(_itl_ms([np.array(r.token_times_s) for r in records]))


def _assert_equal(got: Percentiles, want: Percentiles) -> None:
    for name in ("mean", "p50", "p90", "p99"):
        assert _same(getattr(got, name), getattr(want, name)), name


@pytest.mark.parametrize("seed", range(40))
def test_weighted_percentiles_equal_numpy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 2, 3, 5, 17, 200, 5000]))
    pool = rng.lognormal(size=n)
    if seed % 3 == 0:
        pool = np.round(pool, 1)  # many ties
    if seed % 7 == 0:
        pool[: n // 3] = np.inf
    values, counts = np.unique(pool, return_counts=True)
    q = [50, 90, 99] if seed % 2 else [0, 12.5, 33.3, 50, 66.7, 99.9, 100]
    with np.errstate(invalid="ignore"):  # inf - inf, in numpy's interpolation as in ours
        got, want = weighted_percentiles(values, counts, q), np.percentile(pool, q).tolist()
    assert all(_same(a, b) for a, b in zip(got, want, strict=True))


def _ends(rng, steps: int, ties: bool) -> array:
    gaps = np.round(rng.random(steps) * 4) / 4 if ties else rng.lognormal(-4, 0.3, steps)
    return array("d", (1.0 + np.cumsum(gaps)).tolist())


def _segments(rng, ends: array, output_len: int, shape: str) -> list:
    """Emission segments of one request: a plain run, a preempted one, or prefill only."""
    first = float(rng.random())
    if shape == "prefill":
        return [(first, -1)]
    c0 = int(rng.integers(0, len(ends) - 2 * output_len - 4))
    if shape == "plain":
        return [(first, -1), (c0, output_len - 1 + int(rng.integers(0, 2)))]
    cut = int(rng.integers(0, output_len))
    return [(first, -1), (c0, cut), (first + 0.5, -1), (c0 + cut + 3, output_len)]


def _records(seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    replicas = [_ends(rng, 400, ties=seed % 2 == 0) for _ in range(1 + seed % 3)]
    made = []
    for i in range(int(rng.integers(1, 60))):
        output_len = int(rng.integers(1, 40))
        shape = rng.choice(["plain", "plain", "plain", "prefill", "preempted", "array"])
        if shape == "array":  # a record not built by the simulator
            times = np.sort(rng.random(output_len)).round(2)
            made.append(RequestRecord(id=i, arrival_s=0.0, input_len=8, output_len=output_len,
                                      token_times_s=times))
            continue
        record = SimulatedRecord(id=i, arrival_s=0.0, input_len=8, output_len=output_len)
        ends = replicas[int(rng.integers(len(replicas)))]
        per_step = 1.0 if seed % 5 else 1.5  # speculative decoding: no shared run
        record.set_decode_source(ends, _segments(rng, ends, output_len, shape), per_step, output_len)
        made.append(record)
    return made


@pytest.mark.parametrize("seed", range(60))
def test_itl_from_shared_steps_equals_pooled_gaps(seed):
    records = _records(seed)
    want = _straight(_records(seed))
    got = _itl_percentiles(records)
    _assert_equal(got, want)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)


def test_pool_lists_every_gap_in_record_order():
    records = _records(3)
    pool = gap_pool(records)
    straight = [np.diff(np.array(r.token_times_s)) for r in _records(3)]
    assert pool.pooled().tolist() == np.concatenate(straight).tolist()
    values, counts = pool.multiset()
    assert sorted(np.repeat(values, counts).tolist()) == sorted(pool.pooled().tolist())


def test_no_shared_run_falls_back_to_pooling_arrays():
    records = [r for r in _records(1) if not isinstance(r, SimulatedRecord)]
    assert gap_pool(records) is None
    _assert_equal(_itl_percentiles(records), _straight(records))


def test_compute_metrics_itl_mean_read_late_and_pickled():
    records = _records(4)
    for r in records:
        r.first_token_s, r.finish_s = 0.5, 2.0
    metrics = compute_metrics(records)
    again = pickle.loads(pickle.dumps(metrics))
    want = _straight(_records(4))
    _assert_equal(again.itl_ms, want)
    _assert_equal(metrics.itl_ms, want)
    assert metrics.to_dict()["itl_ms"] == want.to_dict()


def test_token_times_built_when_read_and_assignable():
    ends = array("d", [1.0, 2.0, 3.5, 4.0])
    record = SimulatedRecord(id=0, arrival_s=0.0, input_len=4, output_len=3)
    segments = [(0.5, -1), (1, 3)]
    record.set_decode_source(ends, segments, 1.0, 3)
    assert record.decode_run() == (ends, 0.5, 1, 3)
    ends.append(9.0)  # the replica goes on decoding: earlier steps never change
    assert record.token_times_s.tolist() == [0.5, 2.0, 3.5]
    assert record.token_times_s.tolist() == build_token_times(ends, segments, 1.0, 3).tolist()
    assert record.decode_run() is None  # built: the metrics read the array
    record.token_times_s = np.array([7.0])
    assert record.token_times_s.tolist() == [7.0]
    copy = pickle.loads(pickle.dumps(record))
    assert copy.token_times_s.tolist() == [7.0] and copy.decode_run() is None
    assert SimulatedRecord(id=1, arrival_s=0.0, input_len=1, output_len=1).token_times_s.size == 0

