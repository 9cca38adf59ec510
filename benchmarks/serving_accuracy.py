"""Accuracy of the serving simulator on the serving calibration records (in-sample with the
fitted constants; the leave-one-source-out figure is the one `meshplan calibrate --loso` stored
in serving/data/fitted_serving.yaml). Prints per-metric, per-source and per-GPU errors and the
worst ten records with a diagnosis, and (on the default file) saves the figures the docs
quote to benchmarks/results/serving_accuracy.json and its page blocks, among them the table per
engine, GPU generation and quantity of in-sample, leave-one-source-out and held-out errors
(serving_groups.py). Run: python benchmarks/serving_accuracy.py [FILE]"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from importlib import resources
from pathlib import Path

import yaml

from meshplan.bands.serving_regime import serving_regime_of
from meshplan.calibration import serving as cs
from meshplan.records import CALIBRATION
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats

import diagnoses  # benchmarks/diagnoses.py
import readme_blocks  # benchmarks/readme_blocks.py
import serving_groups  # benchmarks/serving_groups.py

DEFAULT = CALIBRATION["serving"]

DIAGNOSES = [
    (r"gh200.*-tp2-", "GH200 TP2: measured below TP1 on several shapes although TP2 has ~5x the KV "
                      "room; no single set-up explains it: TP over a network fits each shape only at "
                      "its own bandwidth (10-150 Gb/s), a batch cap only at its own size (8-64)"),
    (r"0\.6\.1-static-a100-fp16-llama-70b", "TensorRT-LLM 0.6 A100 70B TP4: the table's 'out tok/s' is "
                                            "per GPU like the H100 table's (x4 the model lands within "
                                            "-20..0%), transcribed as the total"),
    (r"qwen3-30b-a3b|qwen3-235b", "fine-grained MoE (128 experts) in TensorRT-LLM 1.0: one fitted "
                                  "grouped-GEMM efficiency for all its MoE runs leaves prefill-heavy "
                                  "shapes too fast and B200 vs GB200 differences (up to 40%) unexplained"),
    (r"vllm-fp8kv", "vLLM constants are defaults (4 records are too few to fit); the gpt-oss runs' "
                    "20k-token prompts prefill about 21% faster than measured"),
]


def diagnose(record_id: str) -> str:
    return diagnoses.diagnose(record_id, DIAGNOSES)


def _fmt(s: dict) -> str:
    return f"n={s['n']:4d} median {s['median_abs_rel_error']:.1%} p90 {s['p90_abs_rel_error']:.1%}"


def _stored_loso() -> dict | None:
    """The leave-one-source-out errors `calibrate --loso` stored with the fitted constants."""
    fitted = resources.files("meshplan.serving").joinpath("data", "fitted_serving.yaml")
    if not fitted.is_file():
        return None
    return yaml.safe_load(fitted.read_text())["fit"].get("leave_one_source_out")


def band_results() -> dict:
    """Per quantity of the shipped serving bands: the error of its residuals (calibration records
    left out by source, held-out records never fitted) and how many fall inside the band built
    from the other sources alone."""
    import math

    from meshplan.bands import serving as sb

    out = {}
    for kind in sb.KINDS:
        rows = sb._data()["kinds"].get(kind, [])
        if not rows:
            continue
        inside, n = sb.coverage(kind)
        out[kind] = {**error_stats([math.expm1(r["residual"]) for r in rows]), "inside": inside,
                     "share": inside / n, "sources": len({r["source"] for r in rows}),
                     "calibration_residuals": sb._data()["fit"].get("calibration_residuals", "leave-one-source-out")}
    return out


def in_sample_rows(rows) -> list[dict]:
    """The shipped constants' errors on the calibration records as serving_groups rows."""
    out = []
    for fc, m, e in rows:
        c = fc.case
        regime = serving_regime_of(c.model, c.cluster, c.plan, c.workload)
        out.append({"id": fc.record.id, "metric": m, "engine": regime.engine,
                    "architecture": regime.architecture, "error": e})
    return out


def by_engine_generation(records, rows) -> dict:
    """In-sample, leave-one-source-out and held-out errors per engine, GPU generation and quantity
    (the leave-one-source-out and held-out rows are the serving bands' residuals)."""
    from meshplan.bands import serving as sb

    data = sb._data()
    ids = {r.id for r in records if r.kind == "serving"}
    sets = {"in_sample": in_sample_rows(rows), **serving_groups.residual_rows(data["kinds"], ids)}
    return {"groups": serving_groups.table(sets), "metrics": serving_groups.metrics_of(sets),
            "residuals_date": data["fit"]["date"], "constants_fitted": data["fit"]["constants_fitted"]}


def results(records, cases, rows) -> dict:
    """The figures the docs quote (benchmarks/results/serving_accuracy.json)."""
    def stats(pick) -> dict:
        return error_stats([e for fc, m, e in rows if pick(fc, m)])
    metrics = sorted({m for _, m, _ in rows})
    gh200_tp2 = re.compile(r"gh200.*-tp2-")
    return {
        "records": sum(r.kind == "serving" for r in records), "simulated": len(cases),
        "engines": dict(Counter(fc.record.serving.engine for fc in cases)),
        "all": stats(lambda fc, m: True),
        "by_metric": {k: stats(lambda fc, m, k=k: m == k) for k in metrics},
        "by_source": {k: stats(lambda fc, m, k=k: cs._source(fc) == k) for k in sorted({cs._source(fc) for fc in cases})},
        "by_gpu": {k: stats(lambda fc, m, k=k: fc.case.cluster.gpu.name == k)
                   for k in sorted({fc.case.cluster.gpu.name for fc in cases})},
        "output_tokens_per_s_without_gh200_tp2": stats(
            lambda fc, m: m == "output_tokens_per_s" and not gh200_tp2.search(fc.record.id)),
        "leave_one_source_out": _stored_loso(),
        "bands": band_results(),
        "by_engine_generation": by_engine_generation(records, rows),
    }


def main() -> None:
    start = time.perf_counter()
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    records = load_records(path)
    cases = cs.prepare(records)
    rows = cs.errors(cases, {})  # the packaged (fitted) constants
    print(f"{len(cases)} of {sum(r.kind == 'serving' for r in records)} serving records simulated")
    print(f"all metrics        {_fmt(error_stats([e for _, _, e in rows]))}")
    for metric in sorted({m for _, m, _ in rows}):
        print(f"  {metric:18s} {_fmt(error_stats([e for _, m, e in rows if m == metric]))}")
    groups: dict[str, list[float]] = defaultdict(list)
    for fc, m, e in rows:
        groups[f"source {cs._source(fc)}"].append(e)
        groups[f"gpu {fc.case.cluster.gpu.name}"].append(e)
    for key in sorted(groups):
        v = groups[key]
        print(f"  {key:45s} {_fmt(error_stats(v))}  median signed {statistics.median(v):+.1%}")
    if _stored_loso():
        print(f"leave-one-source-out (stored by calibrate --loso): {_fmt(_stored_loso())}")
    print("worst ten (positive: the simulator is too fast):")
    for fc, m, e in sorted(rows, key=lambda r: -abs(r[2]))[:10]:
        print(f"  {fc.record.id:58s} {m:20s} {e:+.0%}  {diagnose(fc.record.id)}")
    if path == DEFAULT:
        res = results(records, cases, rows)
        res["seconds"] = round(time.perf_counter() - start)
        print(readme_blocks.render_serving_groups(res))
        readme_blocks.save("serving_accuracy", res)


if __name__ == "__main__":
    main()
