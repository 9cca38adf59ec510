"""Accuracy of the serving simulator on held-out serving benchmarks (src/meshplan/records/held-out/,
files with serving records: MLPerf Inference v5.1), predicted with the shipped constants as
`meshplan validate --records held-out` predicts them. Prints, per quantity (throughput, TTFT,
TPOT and their p99s), the error overall, per engine and GPU generation and per arrival mode, and
how many measured values fall inside their p10-p90 band (meshplan.bands.serving). Latencies of a
timed run count only where the simulated deployment keeps up with the published rate (its
predicted request rate within 3% of the measured one): a run it cannot sustain has a queue that
grows for as long as it is simulated, so its latencies measure the run's length, not the model;
those are counted apart. Saves benchmarks/results/serving_holdout.json and its page block.
Run: python benchmarks/serving_holdout.py (several minutes on 2 cores)."""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

from meshplan.hardware import get_gpu
from meshplan.records import SETS
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats, predict

import readme_blocks  # benchmarks/readme_blocks.py

QUANTITIES = {"throughput": "output_tokens_per_s", "ttft": "ttft_ms_mean", "ttft_p99": "ttft_ms_p99",
              "tpot": "tpot_ms_mean", "tpot_p99": "tpot_ms_p99"}
SUSTAINED = 0.97


def figures(rows) -> dict:
    if not rows:
        return {"n": 0}
    inside = sum(r.low <= r.measured <= r.high for r in rows)
    return {**error_stats([r.rel_error for r in rows]), "signed_median": statistics.median(r.rel_error for r in rows),
            "inside": inside, "share": inside / len(rows)}


def sustained_ids(rows, records) -> set[str]:
    """Timed records whose simulated deployment keeps up with the published rate."""
    rate = {r.id: r for r in rows if r.metric == "requests_per_s"}
    return {rid for rid, r in rate.items() if r.predicted >= SUSTAINED * r.measured
            and records[rid].serving.workload.mode in ("poisson", "gamma")}


def group_key(record) -> str:
    return f"{record.serving.engine}, {get_gpu(record.hardware.gpu).architecture}"


def file_figures(path, workers: int) -> dict | None:
    records = {r.id: r for r in load_records(path) if r.kind == "serving"}
    if not records:
        return None
    rows, skips = predict(list(records.values()), workers=workers)
    kept = sustained_ids(rows, records)
    timed = {r.id for r in records.values() if r.serving.workload.mode in ("poisson", "gamma")}
    out = {"records": len(records), "skipped": len(skips), "timed": len(timed), "sustained": len(kept),
           "quantities": {}, "groups": defaultdict(dict), "modes": defaultdict(dict)}
    for name, metric in QUANTITIES.items():
        pick = [r for r in rows if r.metric == metric and (name == "throughput" or r.id in kept)]
        out["quantities"][name] = figures(pick)
        by_group, by_mode = defaultdict(list), defaultdict(list)
        for r in pick:
            by_group[group_key(records[r.id])].append(r)
            by_mode[records[r.id].serving.workload.mode].append(r)
        for key, sub in by_group.items():
            out["groups"][key][name] = figures(sub)
        for key, sub in by_mode.items():
            out["modes"][key][name] = figures(sub)
    return out


def _line(name: str, f: dict) -> str:
    if not f.get("n"):
        return f"    {name:10s} -"
    return (f"    {name:10s} n={f['n']:4d} median {f['median_abs_rel_error']:6.1%} p90 {f['p90_abs_rel_error']:7.1%} "
            f"signed median {f['signed_median']:+6.1%} inside band {f['inside']}/{f['n']}")


def main() -> None:
    start = time.perf_counter()
    workers = min(2, os.cpu_count() or 1)
    files = {}
    for path in SETS["held-out"]:
        f = file_figures(path, workers)
        if f is None:
            continue
        files[path.stem] = f
        print(f"{path.name}: {f['records']} serving records, {f['skipped']} skipped; {f['sustained']} of "
              f"{f['timed']} timed runs sustained (their latencies are counted)")
        for name, q in f["quantities"].items():
            print(_line(name, q))
        for title, table in (("per engine, GPU generation", f["groups"]), ("per arrival mode", f["modes"])):
            for key in sorted(table):
                print(f"  {title}: {key}")
                for name, q in table[key].items():
                    print(_line(name, q))
    readme_blocks.save("serving_holdout", {"files": files})
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
