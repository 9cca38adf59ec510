"""Accuracy of the serving simulator on held-out serving benchmarks (src/meshplan/records/held-out/,
files with serving records: MLPerf Inference v5.1, the engines' 2025 blogs), predicted with the
shipped constants as `meshplan validate --records held-out` predicts them. Prints, per quantity
(output and input throughput, TTFT, TPOT and their p99s), the error overall, per engine and GPU
generation, per arrival mode and per cause of issue #32 (disaggregated phase pools vs aggregated
deployments, MoE vs dense), and how many measured values fall inside their p10-p90 band
(meshplan.bands.serving). Latencies of a timed run count only where the simulated deployment keeps
up with the published rate (its predicted request rate within 3% of the measured one): a run it
cannot sustain has a queue that grows for as long as it is simulated, so its latencies measure the
run's length, not the model; those are counted apart. An untimed run (a closed loop at fixed
concurrency, or one offline batch) has no such queue: its latencies always count. Saves benchmarks/results/serving_holdout.json and its page
block.
Run: python benchmarks/serving_holdout.py (several minutes on 2 cores)."""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

from meshplan.bands.serving import pooled_files
from meshplan.hardware import get_gpu
from meshplan.records import SETS
from meshplan.validate.records import load_records, record_model
from meshplan.validate.run import error_stats, predict

import readme_blocks  # benchmarks/readme_blocks.py

QUANTITIES = {"throughput": "output_tokens_per_s", "input_throughput": "input_tokens_per_s",
              "ttft": "ttft_ms_mean", "ttft_p99": "ttft_ms_p99", "tpot": "tpot_ms_mean", "tpot_p99": "tpot_ms_p99"}
THROUGHPUTS = ("throughput", "input_throughput")
SUSTAINED = 0.97
KEPT_UP = 0.9
"""A published timed run that completed fewer requests/s than this share of its offered rate was
overloaded (MLPerf's valid Server runs complete 96-100% of theirs)."""


def figures(rows) -> dict:
    if not rows:
        return {"n": 0}
    inside = sum(r.low <= r.measured <= r.high for r in rows)
    return {**error_stats([r.rel_error for r in rows]), "signed_median": statistics.median(r.rel_error for r in rows),
            "inside": inside, "share": inside / len(rows)}


def sustained_ids(rows, records) -> set[str]:
    """Timed records whose simulated deployment keeps up with the published rate, and whose published
    run itself completed requests at (nearly) the rate it offered: a benchmark that offered 100
    requests/s to a deployment that finished 1.25/s had a queue growing for its whole length too."""
    rate = {r.id: r for r in rows if r.metric == "requests_per_s"}
    return {rid for rid, r in rate.items() if r.predicted >= SUSTAINED * r.measured
            and records[rid].serving.workload.mode in ("poisson", "gamma")
            and r.measured >= KEPT_UP * (records[rid].serving.workload.request_rate or 0.0)}


def group_key(record) -> str:
    return f"{record.serving.engine}, {get_gpu(record.hardware.gpu).architecture}"


def cause_key(record) -> str:
    """The causes issue #32 names: a disaggregated deployment's pool or an aggregated one; MoE or dense."""
    dis = record.serving.disaggregated
    deployment = f"disaggregated {dis.phase or 'pools'}" if dis else "aggregated"
    return f"{deployment}, {'MoE' if record_model(record).is_moe else 'dense'}"


def counted(name: str, row, kept: set[str], records) -> bool:
    """Whether a row's value counts: throughputs always; latencies of a timed run only if sustained,
    of an untimed one (a closed loop, or one offline batch) always: no queue grows with its length."""
    mode = records[row.id].serving.workload.mode
    return name in THROUGHPUTS or row.id in kept or mode not in ("poisson", "gamma")


def file_figures(path, workers: int) -> dict | None:
    records = {r.id: r for r in load_records(path) if r.kind == "serving"}
    if not records:
        return None
    rows, skips = predict(list(records.values()), workers=workers)
    kept = sustained_ids(rows, records)
    timed = {r.id for r in records.values() if r.serving.workload.mode in ("poisson", "gamma")}
    out = {"records": len(records), "skipped": len(skips), "timed": len(timed), "sustained": len(kept),
           "in_band_pools": path.name in pooled_files(), "quantities": {},
           "groups": defaultdict(dict), "modes": defaultdict(dict), "causes": defaultdict(dict)}
    keys = {"groups": group_key, "modes": lambda rec: rec.serving.workload.mode, "causes": cause_key}
    for name, metric in QUANTITIES.items():
        pick = [r for r in rows if r.metric == metric and counted(name, r, kept, records)]
        out["quantities"][name] = figures(pick)
        for table, key_of in keys.items():
            split = defaultdict(list)
            for r in pick:
                split[key_of(records[r.id])].append(r)
            for key, sub in split.items():
                out[table][key][name] = figures(sub)
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
        for title, table in (("per engine, GPU generation", f["groups"]), ("per arrival mode", f["modes"]),
                             ("per cause", f["causes"])):
            for key in sorted(table):
                print(f"  {title}: {key}")
                for name, q in table[key].items():
                    print(_line(name, q))
    readme_blocks.save("serving_holdout", {"files": files})
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
