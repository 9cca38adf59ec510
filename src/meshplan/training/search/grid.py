"""Parallel sweeps: the best plan for every cell of a grid (models x GPUs x sizes x lengths)."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

from meshplan.outfiles import check_writable, open_atomic
from meshplan.parallel import run_tasks
from meshplan.calibration.site import active_site

COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "status", "tp", "pp", "vpp", "cp", "ep",
           "micro_batch_size", "recompute", "dp_sharding", "tokens_per_s_per_gpu", "tokens_per_s_low",
           "tokens_per_s_high", "mfu", "step_time_s", "peak_bytes", "extrapolating", "evaluated",
           "search_seconds", "interruptions_per_day", "checkpoint_interval_s",
           "effective_training_time_ratio")
"""CSV columns; tokens_per_s_low/high: the p10-p90 band (meshplan.bands), extrapolating: its
reasons joined by '; ' (empty inside the calibrated regimes); the last three: the best plan's
goodput at the cited defaults (meshplan.goodput: failures, checkpoints, restarts, stragglers)."""


def sweep_cell(cell: tuple[str, str, int, int], global_batch_tokens: int, framework: str,
               memory_headroom_gib: float = 0.0) -> dict:
    """Search one grid cell (plans leaving `memory_headroom_gib` of GPU memory free); runs in a
    worker process, so it takes and returns plain data."""
    from meshplan import Cluster, load_model
    from meshplan.bands.training import estimate_bands
    from meshplan.errors import MeshplanError
    from meshplan.goodput import goodput
    from meshplan.training import TrainingPlan
    from meshplan.training.search.plans import search

    model_name, gpu, gpus, seq = cell
    row: dict = {"model": model_name, "gpu": gpu, "num_gpus": gpus, "seq_len": seq}
    try:
        model = load_model(model_name)
        base = TrainingPlan(seq_len=seq, global_batch_size=max(1, global_batch_tokens // seq),
                            framework=framework)
        # one process per cell: the sweep already runs cells in parallel
        cluster = Cluster.build(gpu, gpus, memory_headroom_gib=memory_headroom_gib)
        result = search(model, cluster, base, {}, top=1, workers=1)
    except MeshplanError as exc:
        return {**row, "status": f"error: {exc}"}
    row.update(evaluated=result.evaluated, search_seconds=round(result.seconds, 3))
    if not result.ranked:
        return {**row, "status": "nothing fits"}
    best = result.ranked[0]
    p = best.plan
    band = estimate_bands(model, cluster, best).tokens_per_s_per_gpu
    row.update(tokens_per_s_low=round(band.low, 1), tokens_per_s_high=round(band.high, 1),
               extrapolating="; ".join(band.extrapolating))
    row.update(status="ok", tp=p.tp, pp=p.pp, vpp=p.vpp, cp=p.cp, ep=p.ep,
               micro_batch_size=p.micro_batch_size, recompute=p.recompute,
               dp_sharding=p.dp_sharding, tokens_per_s_per_gpu=round(best.tokens_per_s_per_gpu, 1),
               mfu=round(best.mfu, 4), step_time_s=round(best.step_time_s, 4),
               peak_bytes=int(best.memory.peak_bytes))
    good = goodput(model, cluster, p, best.step_time_s)
    row.update(interruptions_per_day=round(good.detail_dict()["interruptions_per_day"], 3),
               checkpoint_interval_s=round(good.checkpoint_interval_s, 1),
               effective_training_time_ratio=round(good.effective_training_time_ratio, 4))
    return row


def run_sweep(models: Iterable[str], gpus: Iterable[str], sizes: Iterable[int],
              seq_lens: Iterable[int], *, global_batch_tokens: int, framework: str, out: Path,
              workers: int, progress: Callable[[], None] | None = None, backend: str = "local",
              address: str | None = None, chunk: int | None = None,
              memory_headroom_gib: float = 0.0) -> list[dict]:
    """Search every cell and write the rows to `out` (CSV): each row is appended to `out`.partial
    as its task finishes (a crash keeps every finished row there), then `out` is written in grid
    order, atomically (meshplan.outfiles).
    `backend` "local" uses a process pool of `workers`; "ray" sends tasks of `chunk` cells to a
    Ray cluster (`address`, or a local Ray with `workers` CPUs), retrying a failed task once."""
    cells = list(itertools.product(models, gpus, sizes, seq_lens))
    chunk = chunk or max(1, min(CHUNK_MAX, -(-len(cells) // (4 * max(workers, 1)))))
    tasks = [cells[i:i + chunk] for i in range(0, len(cells), chunk)]
    rows: list[dict] = []
    partial = check_writable(out, "--out").with_name(Path(out).name + ".partial")
    with open(partial, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()

        def take(done: list[dict]) -> None:
            writer.writerows(done)
            handle.flush()
            rows.extend(done)
            for _ in done:
                if progress:
                    progress()

        site = active_site()
        run_tasks(sweep_chunk, [(t, global_batch_tokens, framework, site, memory_headroom_gib)
                                for t in tasks], take,
                  lambda task, exc: take(_failed(task[0], repr(exc))), backend=backend,
                  workers=workers, address=address)
    rows.sort(key=lambda r: (r["model"], r["gpu"], r["num_gpus"], r["seq_len"]))
    with open_atomic(out, "--out", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    partial.unlink(missing_ok=True)
    return rows


CHUNK_MAX = 200
"""Most cells one task searches (a few hundred searches per Ray task amortise its overhead)."""


def sweep_chunk(cells: list, global_batch_tokens: int, framework: str, site=None,
                memory_headroom_gib: float = 0.0) -> list[dict]:
    """Search a list of cells (one task), under the site profile the sweep was started with."""
    from meshplan.calibration.site import use_site

    use_site(site)
    return [sweep_cell(c, global_batch_tokens, framework, memory_headroom_gib) for c in cells]


def _failed(cells: list, why: str) -> list[dict]:
    """Rows saying that the task holding `cells` failed twice."""
    return [{"model": m, "gpu": g, "num_gpus": n, "seq_len": s, "status": f"error: task failed twice: {why}"}
            for m, g, n, s in cells]
