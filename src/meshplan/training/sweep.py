"""Parallel sweeps: the best plan for every cell of a grid (models x GPUs x sizes x lengths)."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "status", "tp", "pp", "vpp", "cp", "ep",
           "micro_batch_size", "recompute", "dp_sharding", "tokens_per_s_per_gpu", "mfu",
           "step_time_s", "peak_bytes", "evaluated", "search_seconds")


def sweep_cell(cell: tuple[str, str, int, int], global_batch_tokens: int, framework: str) -> dict:
    """Search one grid cell; runs in a worker process, so it takes and returns plain data."""
    from meshplan import Cluster, load_model
    from meshplan.errors import MeshplanError
    from meshplan.training import TrainingPlan
    from meshplan.training.search import search

    model_name, gpu, gpus, seq = cell
    row: dict = {"model": model_name, "gpu": gpu, "num_gpus": gpus, "seq_len": seq}
    try:
        model = load_model(model_name)
        base = TrainingPlan(seq_len=seq, global_batch_size=max(1, global_batch_tokens // seq),
                            framework=framework)
        result = search(model, Cluster.build(gpu, gpus), base, {}, top=1)
    except MeshplanError as exc:
        return {**row, "status": f"error: {exc}"}
    row.update(evaluated=result.evaluated, search_seconds=round(result.seconds, 3))
    if not result.ranked:
        return {**row, "status": "nothing fits"}
    best = result.ranked[0]
    p = best.plan
    row.update(status="ok", tp=p.tp, pp=p.pp, vpp=p.vpp, cp=p.cp, ep=p.ep,
               micro_batch_size=p.micro_batch_size, recompute=p.recompute,
               dp_sharding=p.dp_sharding, tokens_per_s_per_gpu=round(best.tokens_per_s_per_gpu, 1),
               mfu=round(best.mfu, 4), step_time_s=round(best.step_time_s, 4),
               peak_bytes=int(best.memory.peak_bytes))
    return row


def run_sweep(models: Iterable[str], gpus: Iterable[str], sizes: Iterable[int],
              seq_lens: Iterable[int], *, global_batch_tokens: int, framework: str, out: Path,
              workers: int, progress: Callable[[], None] | None = None) -> list[dict]:
    """Search every cell with a process pool and write the rows to `out` (CSV)."""
    cells = list(itertools.product(models, gpus, sizes, seq_lens))
    rows = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(sweep_cell, c, global_batch_tokens, framework) for c in cells]
        for future in as_completed(futures):
            rows.append(future.result())
            if progress:
                progress()
    rows.sort(key=lambda r: (r["model"], r["gpu"], r["num_gpus"], r["seq_len"]))
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return rows
