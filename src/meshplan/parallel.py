"""Run independent tasks in parallel, in a process pool or on Ray, handing each result over as
it finishes. Shared by `train sweep` and `serve sweep`.

A task that raises (a lost worker, an unexpected error) is retried once; a second failure is
handed to `fail` and the rest go on, so no finished result is ever lost.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from meshplan.errors import ConfigError

BACKENDS = ("local", "ray")


def run_tasks(fn: Callable, tasks: Sequence[tuple], take: Callable, fail: Callable, *,
              backend: str = "local", workers: int = 1, address: str | None = None) -> None:
    """Call fn(*task) for every task; `take(result)` as each finishes, `fail(task, exc)` after
    a retried task failed again. backend "local": `workers` processes (1: in this process);
    "ray": a Ray cluster at `address`, else a local Ray with `workers` CPUs."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: use {' or '.join(BACKENDS)}")
    if backend == "ray":
        with _ray(address, workers) as ray:
            _drive(ray.submit(fn), ray.next_done, tasks, take, fail)
    elif workers <= 1:
        for task in tasks:
            _serial(fn, task, take, fail)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            _drive(lambda t: pool.submit(fn, *t), _next_future, tasks, take, fail)


def _serial(fn: Callable, task: tuple, take: Callable, fail: Callable) -> None:
    for attempt in (0, 1):
        try:
            take(fn(*task))
            return
        except Exception as exc:  # noqa: BLE001 - retried once, then reported per task
            if attempt:
                fail(task, exc)


def _drive(submit: Callable, next_done: Callable, tasks: Sequence[tuple], take: Callable,
           fail: Callable) -> None:
    """Submit every task, then hand results over in completion order, retrying once."""
    pending = {submit(t): (t, 0) for t in tasks}
    while pending:
        handle, result, error = next_done(pending)
        task, tries = pending.pop(handle)
        if error is None:
            take(result)
        elif tries:
            fail(task, error)
        else:
            pending[submit(task)] = (task, 1)


def _next_future(pending: dict):
    future = next(as_completed(list(pending)))
    try:
        return future, future.result(), None
    except Exception as exc:  # noqa: BLE001
        return future, None, exc


class _RaySession:
    def __init__(self, ray):
        self.ray = ray

    def submit(self, fn: Callable) -> Callable:
        remote = self.ray.remote(max_retries=0)(fn)
        return lambda task: remote.remote(*task)

    def next_done(self, pending: dict):
        ready, _ = self.ray.wait(list(pending), num_returns=1)
        try:
            return ready[0], self.ray.get(ready[0]), None
        except Exception as exc:  # noqa: BLE001 - a task error or a lost worker
            return ready[0], None, exc


@contextlib.contextmanager
def _ray(address: str | None, workers: int) -> Iterator[_RaySession]:
    """Connect to `address` or start a local Ray with `workers` CPUs; shut down what it started."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'meshplan[ray]'") from None
    started = not ray.is_initialized()
    if started:
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, **quiet)
    try:
        yield _RaySession(ray)
    finally:
        if started:
            ray.shutdown()
