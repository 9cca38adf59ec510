"""Share numbered parts of a job between this process and forked children.

This process forks `processes - 1` children and works on parts itself. Each process claims the
next part by reading one byte from a pipe the parent filled with the part numbers before forking
(a one-byte read from a pipe is atomic, so no part is taken twice and a process that finishes
early takes more). A child inherits everything it needs, reports how far it is in its own slot
of a shared page, and pickles its results back through a pipe of its own when the parts run
out. A child that fails sends its traceback instead, and the parent raises it.

This costs about a millisecond per child, where a `multiprocessing` pool costs tens of
milliseconds to start and leaves the parent idle.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import struct
import traceback
from collections.abc import Callable
from typing import Any

MAX_PARTS = 255
"""Parts one job may have: a part number is one byte."""
_SLOT = struct.Struct("q")


class WorkerError(RuntimeError):
    """A forked child failed; the message carries its traceback."""


def can_fork() -> bool:
    """Whether this platform can fork (not Windows)."""
    return hasattr(os, "fork")


def run_parts(sizes: list[int], work: Callable[[int, bool], Any], processes: int,
              progress: Callable[[int], None] | None = None) -> list:
    """`[work(i, in_parent) for i in range(len(sizes))]`, shared by this process and
    `processes - 1` forked children; `in_parent` says whether the result stays in this process
    (a child's is pickled). `progress(units)` is told the sum of `sizes` of the parts done so
    far, after each part this process finishes."""
    if len(sizes) > MAX_PARTS:
        raise ValueError(f"run_parts takes at most {MAX_PARTS} parts, got {len(sizes)}")
    if not sizes:
        return []
    processes = max(processes, 1)
    tokens, filler = os.pipe()
    os.write(filler, bytes(range(len(sizes))))  # at most 255 bytes: never blocks
    os.close(filler)
    board = mmap.mmap(-1, _SLOT.size * processes)
    children: list[tuple[int, int]] = []
    try:
        for slot in range(1, processes):
            try:
                children.append(_fork(slot, tokens, board, sizes, work))
            except OSError:  # the system allows no more processes: the ones running take the parts
                break
        results = dict(_claim(tokens, sizes, work, True, board, progress, processes))
        while children:
            results.update(_collect(*children.pop()))
    finally:
        os.close(tokens)
        _stop(children)
        board.close()
    if progress is not None:
        progress(sum(sizes))
    return [results[i] for i in range(len(sizes))]


def _claim(tokens: int, sizes: list[int], work: Callable[[int, bool], Any], in_parent: bool,
           board: mmap.mmap, progress: Callable[[int], None] | None, processes: int,
           slot: int = 0) -> list[tuple[int, Any]]:
    """Take parts until none is left: (part, result) of each, in the order taken."""
    out, done = [], 0
    while part := os.read(tokens, 1):
        i = part[0]
        out.append((i, work(i, in_parent)))
        done += sizes[i]
        _SLOT.pack_into(board, _SLOT.size * slot, done)
        if progress is not None:
            progress(sum(_SLOT.unpack_from(board, _SLOT.size * k)[0] for k in range(processes)))
    return out


def _fork(slot: int, tokens: int, board: mmap.mmap, sizes: list[int],
          work: Callable[[int, bool], Any]) -> tuple[int, int]:
    """Start a child working on parts; (its pid, the read end of its result pipe)."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise
    if pid:
        os.close(write_end)
        return pid, read_end
    status = 1
    try:  # the child: never returns into the caller's code
        os.close(read_end)
        try:
            payload = pickle.dumps((True, _claim(tokens, sizes, work, False, board, None, 0, slot)))
        except BaseException:  # noqa: BLE001 - every failure goes back to the parent
            payload = pickle.dumps((False, traceback.format_exc()))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(payload)
        status = 0
    finally:
        os._exit(status)


def _collect(pid: int, fd: int) -> list[tuple[int, Any]]:
    """A child's results, once it has sent them and exited."""
    with os.fdopen(fd, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not payload:
        raise WorkerError(f"a forked worker (pid {pid}) exited with status {status} before "
                          f"sending its results")
    ok, value = pickle.loads(payload)
    if not ok:
        raise WorkerError(f"a forked worker (pid {pid}) failed:\n{value}")
    return value


def _stop(children: list[tuple[int, int]]) -> None:
    """Kill and reap children whose results were not collected (the parent failed first)."""
    for pid, fd in children:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
