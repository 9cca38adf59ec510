"""A plan search split over forked workers (`training.search.sweep`) returns what the search in
one process returns: the same ranked plans and numbers, counts, invalid reasons, and the closest
plans when nothing fits (which also exercises the offload sweep). Parts are cut where the layout
changes, so duplicates never span two workers."""

from __future__ import annotations

import sys

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.search import sweep as search_sweep
from meshplan.training.search.plans import candidate_updates, search

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="forked workers need fork")

CASES = [
    ("mixtral-8x7b", 64, dict(seq_len=4096, global_batch_size=256, framework="megatron"), {}),
    ("llama-3.1-8b", 16, dict(seq_len=8192, global_batch_size=64, framework="torchtitan"), {}),
    ("llama-3.1-8b", 8, dict(seq_len=4096, global_batch_size=64, framework="hf", method="lora"), {}),
    ("llama-3.1-405b", 16, dict(seq_len=4096, global_batch_size=64, framework="deepspeed"), {}),
    ("deepseek-v2-lite", 16, dict(seq_len=4096, global_batch_size=64, framework="megatron"),
     {"recompute": "full"}),
]


def _summary(result):
    return ([(e.plan, e.step_time_s, e.memory.peak_bytes) for e in result.ranked], result.scores,
            result.evaluated, result.rejected_invalid, result.rejected_memory, result.invalid_reasons,
            [m.peak_bytes for m in result.closest], [m.plan for m in result.closest])


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[2]['framework']}" for c in CASES])
def test_forked_workers_give_the_serial_result(case, monkeypatch):
    name, gpus, fields, pinned = case
    model, cluster = load_model(name), Cluster.build("h100-sxm-80gb", gpus)
    base = TrainingPlan(**fields)
    serial = search(model, cluster, base, pinned, top=8)
    monkeypatch.setattr(search_sweep, "PARALLEL_FROM", 0)
    parallel = search(model, cluster, base, pinned, top=8, workers=3)
    assert _summary(parallel) == _summary(serial)


def test_progress_reaches_the_end_from_workers(monkeypatch):
    monkeypatch.setattr(search_sweep, "PARALLEL_FROM", 0)
    seen = []
    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 32)
    search(model, cluster, TrainingPlan(seq_len=4096, global_batch_size=128), {}, workers=2,
           progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_small_searches_stay_in_this_process(monkeypatch):
    monkeypatch.setattr(search_sweep, "_parallel", lambda *a: pytest.fail("forked a small search"))
    model, cluster = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 2)
    base = TrainingPlan(seq_len=4096, global_batch_size=64)
    assert len(list(candidate_updates(base, model, cluster, {}))) < search_sweep.PARALLEL_FROM
    assert search(model, cluster, base, {}, workers=4).ranked


@pytest.mark.parametrize("n", [1, 3, 8, 50])
def test_parts_cover_the_candidates_in_order_and_cut_between_layouts(n):
    model, cluster = load_model("mixtral-8x7b"), Cluster.build("h100-sxm-80gb", 64)
    updates = list(candidate_updates(TrainingPlan(seq_len=4096, global_batch_size=256), model, cluster, {}))
    spans = search_sweep.layout_parts(updates, n)
    assert spans[0][0] == 0 and spans[-1][1] == len(updates)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for _, stop in spans[:-1]:
        assert search_sweep._layout(updates[stop]) != search_sweep._layout(updates[stop - 1])
    assert len(spans) <= n


def test_default_workers_are_the_cpus_of_a_single_threaded_process_else_one(monkeypatch):
    import threading

    monkeypatch.setattr(search_sweep, "usable_cpus", lambda: 6)
    monkeypatch.setattr(search_sweep, "_on_linux", lambda: True)
    assert search_sweep.default_workers() == (6 if threading.active_count() == 1 else 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert search_sweep.default_workers() == 1  # a fork would copy that thread's locks
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(search_sweep, "_on_linux", lambda: False)  # macOS, Windows
    assert search_sweep.default_workers() == 1


def test_a_search_left_to_its_default_shares_its_work(monkeypatch):
    """With no `workers`, a single-threaded process shares a large search (the result is the
    serial one, as above)."""
    import threading

    if threading.active_count() > 1:
        pytest.skip("another thread runs in this test process")
    asked = []
    real = search_sweep._parallel
    monkeypatch.setattr(search_sweep, "usable_cpus", lambda: 2)
    monkeypatch.setattr(search_sweep, "_on_linux", lambda: True)
    monkeypatch.setattr(search_sweep, "_parallel", lambda task, n, p: asked.append(n) or real(task, n, p))
    model, cluster = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 16)
    search(model, cluster, TrainingPlan(seq_len=8192, global_batch_size=128), {})
    assert asked == [2]
