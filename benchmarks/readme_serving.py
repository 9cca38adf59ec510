"""The serving blocks of the README and the accuracy page (serving accuracy, per engine and GPU
generation, held-out files), rendered by benchmarks/readme_blocks.py from the benchmarks' saved
results: pure formatting, no figure is computed here."""

from __future__ import annotations

from readme_cells import ACCURACY_ALIGN, ACCURACY_HEADER, band_cell, md_table, med_p90, pct, spct

SERVING_BANDS = {"throughput": "throughput", "ttft": "TTFT (mean, median)", "ttft_tail": "TTFT p90/p99",
                 "tpot": "TPOT, ITL, E2E (mean, median)", "tpot_tail": "TPOT p90/p99"}
"""The serving bands' quantities (meshplan.bands.serving.KINDS) as the accuracy table names them."""


def render_serving_accuracy(acc: dict) -> str:
    """Accuracy table of the serving simulator, per GPU and per source."""
    m, engines = acc["by_metric"], acc["engines"]
    out, sans = m["output_tokens_per_s"], acc["output_tokens_per_s_without_gh200_tp2"]
    rows = [[f"output tokens/s, in-sample ({out['n']} values)", *med_p90(out), "10% / 25%"],
            [f"all metrics, in-sample ({acc['all']['n']})", *med_p90(acc["all"]), ""],
            ["all metrics, leave-one-source-out", *med_p90(acc["leave_one_source_out"]), ""],
            [f"TTFT mean ({m['ttft_ms_mean']['n']} values)", *med_p90(m["ttft_ms_mean"]), ""],
            [f"output tokens/s without the GH200 TP2 values ({sans['n']})", *med_p90(sans), ""]]
    bands = acc.get("bands", {})
    rows = [[*r, ""] for r in rows]
    how = {"in-sample": "calibration records in-sample, held-out ones never fitted"}
    rows += [[f"{SERVING_BANDS[k]}: {b['n']} values of {b['sources']} sources, "
              f"{how.get(b.get('calibration_residuals'), 'each left out or held out')}", *med_p90(b), "", band_cell(b)]
             for k, b in sorted(bands.items(), key=lambda kv: list(SERVING_BANDS).index(kv[0]))]
    table = md_table([*ACCURACY_HEADER, "inside the p10-p90 band"], [*ACCURACY_ALIGN, "---:"], rows)
    gpus = ", ".join(f"{g} {pct(s['median_abs_rel_error'])} / {pct(s['p90_abs_rel_error'])}"
                     for g, s in sorted(acc["by_gpu"].items(), key=lambda kv: kv[1]["median_abs_rel_error"]))
    sources = ", ".join(f"{k} {pct(s['median_abs_rel_error'])} / {pct(s['p90_abs_rel_error'])} ({s['n']})"
                        for k, s in sorted(acc["by_source"].items()))
    mix = ", ".join(f"{n} {e}" for e, n in sorted(engines.items(), key=lambda kv: -kv[1]))
    return (f"{acc['simulated']} of {acc['records']} serving records simulated ({mix}).\n\n{table}\n\n"
            f"Per GPU (median / p90): {gpus}. Per source (median / p90, values): {sources}.\n")


GROUP_SETS = ("in_sample", "loso", "held_out")
"""The three figures of a cell of the per-engine serving table, in order (serving_groups.SETS)."""
GROUP_QUANTITIES = {"throughput": "throughput", "ttft": "TTFT", "tpot": "TPOT", "ttft_tail": "TTFT",
                    "tpot_tail": "TPOT"}
"""The per-engine table's columns in order, each a quantity of bands.serving.KINDS."""


def _group_header(kind: str, metrics: list[str]) -> str:
    """A column's name; a tail column names the percentiles its values are (p99, p90/p99)."""
    if not kind.endswith("_tail"):
        return GROUP_QUANTITIES[kind]
    stats = sorted({m.rsplit("_", 1)[1] for m in metrics}, key=lambda p: int(p[1:]))
    return f"{GROUP_QUANTITIES[kind]} {'/'.join(stats)}"


def _group_cell(by_set: dict | None, signed: bool) -> str:
    """'in-sample / leave-one-source-out / held-out', each a median (values) or '—'."""
    if not by_set:
        return "—"
    parts = []
    for name in GROUP_SETS:
        c = by_set.get(name, {"n": 0})
        if not c["n"]:
            parts.append("—")
            continue
        value = spct(c["signed_median"]) if signed else pct(c["median_abs_rel_error"])
        parts.append(f"{value} ({c['n']})")
    return " / ".join(parts)


def _grouptable(d: dict, signed: bool) -> str:
    kinds = [k for k in GROUP_QUANTITIES if any(k in g for g in d["groups"].values())]
    header = ["engine, GPU generation", *(_group_header(k, d["metrics"].get(k, [])) for k in kinds)]
    order = ["all", *sorted(g for g in d["groups"] if g != "all")]
    rows = [[f"**{g}**" if g == "all" else g, *(_group_cell(d["groups"][g].get(k), signed) for k in kinds)]
            for g in order]
    return md_table(header, ["---", *["---:"] * len(kinds)], rows)


def render_serving_groups(acc: dict) -> str:
    """Per engine and GPU generation and per quantity: in-sample, leave-one-source-out and held-out
    median errors (absolute, then signed)."""
    d = acc["by_engine_generation"]
    return (f"Median absolute error (values), each cell in-sample / leave-one-source-out / held-out:\n\n"
            f"{_grouptable(d, False)}\n\nSigned median (positive: predicted too high; a latency too "
            f"long, a throughput too high), same cells:\n\n{_grouptable(d, True)}\n\n"
            f"In-sample: the {acc['simulated']} calibration records simulated with the shipped constants, "
            f"which were fitted on them ({d['constants_fitted']}). Leave-one-source-out: the same records, "
            f"each source predicted by constants refitted without it, and held-out: the records of "
            f"`records/held-out/`, which no fit reads, predicted by the shipped constants; both are the "
            f"serving bands' residuals (`bands/data/serving_residuals.yaml`, written by "
            f"`scripts/fit_serving_bands.py` on {d['residuals_date']}), one value per record and "
            f"quantity. TTFT is the mean or the median, TPOT the mean or median of TPOT, ITL or E2E "
            f"latency. `python benchmarks/serving_accuracy.py` took {acc['seconds']} s on the shared "
            f"2-core machine, nearly all of it the in-sample simulations (the other columns are read "
            f"from the file; refitting them is `scripts/fit_serving_bands.py`'s work, about as long as "
            f"`calibrate --loso`).\n")


SERVING_HOLDOUT_NAMES = {"mlperf-inference-v5.1": "MLPerf Inference v5.1 (Llama 2 70B, Llama 3.1 405B)",
                         "serving-engines-2025": "The engines' own 2025 publications (SGLang on LMSYS's blog, a "
                                                 "TensorRT-LLM tech blog, vLLM's recipes: DeepSeek-V3/R1, Kimi K2)",
                         "serving-engines-2025b": "The engines' own publications, second pass (SGLang's gpt-oss-120b "
                                                  "post and cookbook: gpt-oss-120b, Qwen3-235B, DeepSeek-R1 and Kimi K2 "
                                                  "on B200, Llama 3.1 70B on A100, DeepSeek-V3, Kimi K2 and Llama 4 "
                                                  "Scout on MI300X; TensorRT-LLM's FP8 Llama 2 70B on one H200)",
                         "gpustack-performance-lab": "GPUStack's performance lab (vllm bench serve against vLLM, SGLang "
                                                     "and TensorRT-LLM: Qwen3-8B/14B/32B/235B, gpt-oss-20b/120b on "
                                                     "H100 and A100, DeepSeek-R1 on H200)"}
HOLDOUT_QUANTITIES = {"throughput": "output tokens/s", "input_throughput": "input tokens/s", "ttft": "TTFT mean",
                      "ttft_p99": "TTFT p99", "tpot": "TPOT mean", "tpot_p99": "TPOT p99"}


def _holdout_row(label: str, f: dict) -> list[str]:
    if not f.get("n"):
        return [label, "0", "", "", "", ""]
    return [label, str(f["n"]), *med_p90(f), spct(f["signed_median"]), band_cell(f)]


def _holdout_rows(f: dict) -> list[list[str]]:
    """Each quantity with values: overall, per arrival mode (throughputs), per engine and GPU
    generation, per cause (disaggregated pool or aggregated, MoE or dense)."""
    quantities = [q for q in HOLDOUT_QUANTITIES if f["quantities"].get(q, {}).get("n")]
    rows = [_holdout_row(f"**{HOLDOUT_QUANTITIES[q]}**, all", f["quantities"][q]) for q in quantities]
    rows += [_holdout_row(f"{HOLDOUT_QUANTITIES[q]}, {mode} arrivals", f["modes"][mode][q])
             for q in quantities if q in ("throughput", "input_throughput")
             for mode in sorted(f["modes"]) if f["modes"][mode].get(q, {}).get("n")]
    for table in ("groups", "causes"):
        for q in quantities:
            rows += [_holdout_row(f"{HOLDOUT_QUANTITIES[q]}, {g}", f[table][g][q])
                     for g in sorted(f.get(table, {})) if f[table][g].get(q, {}).get("n")]
    return rows


def render_serving_holdout(d: dict) -> str:
    """Per held-out serving file: each quantity overall, per arrival mode, per engine and GPU
    generation and per cause."""
    out = []
    for name, f in d["files"].items():
        table = md_table(["quantity", "values", "median abs. error", "p90 abs. error", "signed median",
                        "inside the p10-p90 band"], ["---", "---:", "---:", "---:", "---:", "---:"], _holdout_rows(f))
        pooled = ("These records' own residuals are in the bands' pools, so the last column is not out of "
                  "sample (the serving accuracy table gives that)." if f.get("in_band_pools", True) else
                  "The bands' pools have never seen these records: the last column is out of sample.")
        out.append(f"{SERVING_HOLDOUT_NAMES.get(name, name)}: {f['records']} records, {f['skipped']} not "
                   f"representable; latencies of the {f['sustained']} of {f['timed']} timed runs the "
                   f"simulated deployment sustains, and of every untimed one. {pooled}\n\n{table}\n")
    return "\n".join(out)


def serving_held_out_rows(serving: dict) -> list[list[str]]:
    """Throughput, TTFT and TPOT of the held-out serving runs (one value per record and quantity,
    as the serving accuracy page's per-engine table counts them)."""
    cells = serving["by_engine_generation"]["groups"]["all"]
    names = {"throughput": "serving throughput", "ttft": "serving TTFT", "tpot": "serving TPOT"}
    return [[f"{name}, held out", f"{cells[kind]['held_out']['n']} values of public runs no fit reads "
             "(MLPerf v5.1, the engines' blogs and cookbooks, GPUStack's lab)", *med_p90(cells[kind]["held_out"]), ""]
            for kind, name in names.items() if cells.get(kind, {}).get("held_out")]
