"""`training.search.forked.run_parts`: parts shared by this process and forked children come back in
order, whoever ran them; a child's failure or death is raised in the parent with what happened;
a failing parent leaves no child behind; progress counts every part once."""

from __future__ import annotations

import os
import time

import pytest

from meshplan.training.search import forked

pytestmark = pytest.mark.skipif(not forked.can_fork(), reason="needs fork")


def _no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_results_come_back_in_part_order_from_every_process():
    parent = os.getpid()

    def work(i, in_parent):
        time.sleep(0.01)
        assert in_parent == (os.getpid() == parent)
        return i * i, os.getpid()

    out = forked.run_parts([1] * 30, work, 3)
    assert [square for square, _ in out] == [i * i for i in range(30)]
    assert parent in {pid for _, pid in out} and len({pid for _, pid in out}) > 1
    assert _no_children_left()


def test_one_process_runs_everything_here():
    out = forked.run_parts([2, 3], lambda i, here: (i, here, os.getpid()), 1)
    assert out == [(0, True, os.getpid()), (1, True, os.getpid())]


def test_a_failing_child_raises_its_traceback_in_the_parent():
    def work(i, in_parent):
        if not in_parent:
            raise ValueError(f"bad part {i}")
        time.sleep(0.05)  # the parent is slow, so a child surely takes a part

    with pytest.raises(forked.WorkerError, match="ValueError: bad part"):
        forked.run_parts([1] * 20, work, 2)
    assert _no_children_left()


def test_a_child_that_dies_is_reported():
    def work(i, in_parent):
        if not in_parent:
            os._exit(3)
        time.sleep(0.05)

    with pytest.raises(forked.WorkerError, match="before sending its results"):
        forked.run_parts([1] * 20, work, 2)
    assert _no_children_left()


def test_a_failing_parent_leaves_no_child_behind():
    def work(i, in_parent):
        if in_parent:
            raise KeyError("parent")
        time.sleep(0.02)

    with pytest.raises(KeyError):
        forked.run_parts([1] * 20, work, 3)
    assert _no_children_left()


def test_progress_counts_each_part_once_and_ends_at_the_total():
    seen = []
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    forked.run_parts(sizes, lambda i, _: time.sleep(0.005), 2, seen.append)
    assert seen[-1] == sum(sizes) and max(seen) == sum(sizes) and seen == sorted(seen)


def test_part_count_is_checked():
    with pytest.raises(ValueError, match="at most 255 parts"):
        forked.run_parts([1] * 256, lambda i, _: i, 2)
    assert forked.run_parts([], lambda i, _: i, 2) == []


def test_a_fork_the_system_refuses_leaves_the_work_to_the_processes_running(monkeypatch):
    real, calls = os.fork, []

    def fork():
        calls.append(1)
        if len(calls) > 1:
            raise BlockingIOError("Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(os, "fork", fork)
    out = forked.run_parts([1] * 12, lambda i, _: (time.sleep(0.005), i)[1], 4)
    assert out == list(range(12)) and len(calls) == 2
    assert _no_children_left()
