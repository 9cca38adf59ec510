"""`train sweep` backends: a process pool and Ray (a local instance, as CI runs it), rows written
as tasks finish, a failed task retried once and then reported, never losing finished rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from meshplan.training.search import grid as sweep

GRID = (["llama-3.2-1b", "gpt2"], ["h100-sxm-80gb"], [8, 16], [2048])


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run(tmp_path: Path, backend: str, **extra) -> list[dict]:
    out = tmp_path / f"{backend}.csv"
    sweep.run_sweep(*GRID, global_batch_tokens=2**20, framework="megatron", out=out, workers=2,
                    backend=backend, chunk=1, **extra)
    return rows_of(out)


def layout(rows: list[dict]) -> list[tuple]:
    keys = ("model", "num_gpus", "status", "tp", "pp", "micro_batch_size", "tokens_per_s_per_gpu")
    return [tuple(r[k] for k in keys) for r in rows]


def test_ray_gives_the_process_pool_rows(tmp_path):
    pytest.importorskip("ray")
    local, ray_rows = run(tmp_path, "local"), run(tmp_path, "ray")
    assert len(local) == 4 and all(r["status"] == "ok" for r in local)
    assert layout(ray_rows) == layout(local)


def flaky(cells, global_batch_tokens, framework, site=None, headroom=0.0, _real=sweep.sweep_chunk):
    """Fails the first attempt at gpt2 on 16 GPUs (a marker file remembers across processes),
    and every attempt at gpt2 on 8 GPUs."""
    model, _, gpus, _ = cells[0]
    marker = Path(flaky.marker)
    if model == "gpt2" and gpus == 8:
        raise RuntimeError("worker lost")
    if model == "gpt2" and gpus == 16 and not marker.exists():
        marker.write_text("tried")
        raise RuntimeError("worker lost")
    return _real(cells, global_batch_tokens, framework, site, headroom)


def test_a_failed_task_is_retried_once_then_reported(tmp_path, monkeypatch):
    flaky.marker = str(tmp_path / "tried")
    monkeypatch.setattr(sweep, "sweep_chunk", flaky)  # forked workers see the patched module
    rows = {(r["model"], r["num_gpus"]): r for r in run(tmp_path, "local")}
    assert rows[("gpt2", "16")]["status"] == "ok"  # failed once, retried
    assert rows[("gpt2", "8")]["status"].startswith("error: task failed twice: RuntimeError('worker lost')")
    assert rows[("llama-3.2-1b", "8")]["status"] == rows[("llama-3.2-1b", "16")]["status"] == "ok"


def test_rows_are_on_disk_as_tasks_finish(tmp_path, monkeypatch):
    seen = []

    def progress():
        seen.append(len(rows_of(tmp_path / "local.csv.partial")))

    sweep.run_sweep(*GRID, global_batch_tokens=2**20, framework="megatron", out=tmp_path / "local.csv",
                    workers=2, backend="local", chunk=1, progress=progress)
    assert seen == [1, 2, 3, 4]  # each finished row is on disk before the next one arrives
    assert len(rows_of(tmp_path / "local.csv")) == 4 and not (tmp_path / "local.csv.partial").exists()


@pytest.mark.parametrize("backend, workers", [("local", 1), ("local", 2), ("ray", 2)])
def test_serve_sweep_rates_are_the_same_on_every_backend(backend, workers):
    if backend == "ray":
        pytest.importorskip("ray")
    from typer.testing import CliRunner

    from meshplan.cli.app import app

    args = ["serve", "sweep", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--rates", "2,8,4",
            "--num-requests", "60", "--quiet"]
    runner = CliRunner()
    base = runner.invoke(app, args).stdout
    again = runner.invoke(app, [*args, "--backend", backend, "--workers", str(workers)])
    assert again.exit_code == 0, again.output
    assert again.stdout == base and base.index(" 2.0 ") < base.index(" 4.0 ") < base.index(" 8.0 ")
