"""Background jobs: each long computation runs in its own process (forked from a forkserver
that has the numerics preloaded), at most `max_running` at a time (the machine's cores), the
rest queued. Progress comes back over a pipe; cancelling a job terminates its process, so any
job can be stopped at once, wherever it is. Finished jobs are kept (up to `keep`) for their
results and downloads."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from meshplan.errors import ConfigError

FINAL = ("done", "failed", "cancelled")
"""States a job never leaves."""
PRELOAD = ["meshplan.ui.work", "meshplan.training.search.plans", "meshplan.serving.search.run",
           "meshplan.validate.run"]
"""Modules the forkserver imports once, so a job's process starts without importing them."""


class TooManyJobs(ConfigError):
    """More jobs waiting than the server accepts (HTTP 429)."""


@dataclass(slots=True)
class Job:
    """One background job and what the page is shown of it."""

    id: str
    kind: str
    body: dict
    state: str = "queued"
    done: int = 0
    total: int = 0
    result: dict | None = None
    error: str | None = None
    status: int | None = None
    created_s: float = field(default_factory=time.time)
    started_s: float | None = None
    finished_s: float | None = None
    version: int = 0
    process: Any = None

    def view(self, with_result: bool = True) -> dict:
        """The job as JSON: state, progress, timings, and the result or the error."""
        data = {"id": self.id, "kind": self.kind, "state": self.state, "done": self.done,
                "total": self.total, "error": self.error, "status": self.status,
                "created_s": self.created_s, "started_s": self.started_s,
                "finished_s": self.finished_s, "input": self.body}
        if with_result:
            data["result"] = self.result
        return data


class JobManager:
    """Submit, watch and cancel background jobs."""

    def __init__(self, max_running: int | None = None, max_waiting: int = 64, keep: int = 200):
        self.max_running = max_running or min(2, os.cpu_count() or 1)
        self.max_waiting, self.keep = max_waiting, keep
        self._slots = threading.Semaphore(self.max_running)
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._ids = itertools.count(1)
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)

    def start(self) -> None:
        """Start the forkserver now (it imports PRELOAD once), so the first job starts quickly."""
        from multiprocessing import forkserver

        forkserver.ensure_running()

    def submit(self, kind: str, body: dict) -> Job:
        """Queue a job; it starts when a slot is free."""
        with self._lock:
            waiting = sum(j.state == "queued" for j in self._jobs.values())
            if waiting >= self.max_waiting:
                raise TooManyJobs(f"{waiting} jobs are waiting; the limit is {self.max_waiting}: "
                                  f"try again when some have finished")
            job = Job(id=f"{next(self._ids)}-{secrets.token_hex(4)}", kind=kind, body=body)
            self._jobs[job.id] = job
            self._forget_old()
        threading.Thread(target=self._run, args=(job,), daemon=True, name=f"job-{job.id}").start()
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def list(self) -> list[Job]:
        return list(self._jobs.values())

    def cancel(self, job_id: str) -> Job | None:
        """Stop a job: a queued one never starts, a running one's process is terminated."""
        job = self._jobs.get(job_id)
        if job is None or job.state in FINAL:
            return job
        self._finish(job, "cancelled")
        if job.process is not None and job.process.is_alive():
            job.process.terminate()
        return job

    def shutdown(self) -> None:
        """Cancel every job that has not finished (the server is stopping)."""
        for job in list(self._jobs.values()):
            self.cancel(job.id)

    def _run(self, job: Job) -> None:
        with self._slots:
            if job.state in FINAL:  # cancelled while queued
                return
            try:
                self._run_process(job)
            except Exception as exc:  # noqa: BLE001 - the job fails, the server keeps serving
                self._fail(job, 500, f"the job could not run: {type(exc).__name__}: {exc}")

    def _run_process(self, job: Job) -> None:
        from meshplan.ui.work import run_in_child

        reader, writer = self._ctx.Pipe(duplex=False)
        job.process = self._ctx.Process(target=run_in_child, args=(job.kind, job.body, writer),
                                        daemon=True, name=f"meshplan-job-{job.id}")
        job.process.start()
        writer.close()
        with self._lock:
            if job.state not in FINAL:
                job.state, job.started_s = "running", time.time()
        self._touch(job)
        self._listen(job, reader)
        job.process.join()
        if job.state not in FINAL:  # the process ended without an answer
            self._fail(job, 500, f"the job's process ended with code {job.process.exitcode}")

    def _listen(self, job: Job, reader) -> None:
        """Apply the process's messages to the job until it answers, ends or is cancelled."""
        while job.state not in FINAL:
            try:
                if not reader.poll(0.2):
                    if not job.process.is_alive():
                        return
                    continue
                message = reader.recv()
            except (EOFError, OSError):
                return
            if message[0] == "progress":
                job.done, job.total = message[1], message[2]
                self._touch(job)
            elif message[0] == "result":
                job.result, job.done = message[1], job.total
                self._finish(job, "done")
            else:
                self._fail(job, message[1], message[2])
        reader.close()

    def _fail(self, job: Job, status: int, message: str) -> None:
        job.status, job.error = status, message
        self._finish(job, "failed")

    def _finish(self, job: Job, state: str) -> None:
        with self._lock:
            if job.state in FINAL:
                return
            job.state, job.finished_s = state, time.time()
        self._touch(job)

    def _touch(self, job: Job) -> None:
        job.version += 1

    def _forget_old(self) -> None:
        """Drop the oldest finished jobs beyond `keep` (caller holds the lock)."""
        finished = [j.id for j in self._jobs.values() if j.state in FINAL]
        for job_id in finished[:max(0, len(self._jobs) - self.keep)]:
            del self._jobs[job_id]
