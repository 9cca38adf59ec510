"""Write src/meshplan/records/held-out/mlperf-inference-v5.1.yaml: every closed-division datacenter
Llama 2 70B and Llama 3.1 405B result of MLPerf Inference v5.1 as a serving run record.

Reads a local git mirror of github.com/mlcommons/inference_results_v5.1 (the path is an argument;
nothing is downloaded): `summary_results.json` lists the results; for each, the performance
run's `mlperf_log_summary.txt` gives the measured tokens/s, samples/s and, for Server and
Interactive runs, the mean, median and p99 of time to first token and time per output token,
with the scenario's target rate and p99 limits. The engine settings each submitter ran come from
its code in the same repository (scripts/mlperf_engine_settings.py reads them): NVIDIA's harness
configs (`configs/<system>/<scenario>/<model>.py`, also used by its partners), AMD's vLLM harness
YAML (`code/<benchmark>/harness_llm/models/llama2-70b/<scenario>_<gpu>.yaml`) and MangoBoost's
LLMBoost server flags. A result the schema cannot state (no catalog GPU, mixed GPUs, an
unreadable log) is listed in the file's header with the reason.

    python scripts/mlperf_serving_records.py /path/to/inference_results_v5.1-git-dir
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from mlperf_engine_settings import engine_settings  # scripts/mlperf_engine_settings.py

REPO = "mlcommons/inference_results_v5.1"
OUT = Path(__file__).resolve().parents[1] / "src" / "meshplan" / "records" / "held-out" / "mlperf-inference-v5.1.yaml"

BENCHMARKS = {
    "llama2-70b-99": ("llama-2-70b", "llama2-70b"),
    "llama2-70b-99.9": ("llama-2-70b", "llama2-70b"),
    "llama3.1-405b": ("llama-3.1-405b", "llama3_1-405b"),
}
"""MLPerf model name -> (meshplan catalog model, config file stem)."""

INPUT_MEAN = {
    "llama-2-70b": (222, "OpenOrca subset of 24,576 prompts (Llama 2 tokenizer), inputs of at most 1,024 "
                         "tokens with a long tail; mean 222 tokens as issue #32 quotes it for the set"),
    "llama-3.1-405b": (9400, "8,313 long-context prompts (LongBench, RULER, GovReport and others), mean "
                             "about 9.4k tokens as issue #32 quotes it for the set"),
}
"""Mean prompt length per benchmark: not in the results repository; recalled (see notes)."""

GPUS = {
    "NVIDIA H100-SXM-80GB": "h100-sxm-80gb", "NVIDIA H200-SXM-141GB": "h200-sxm-141gb",
    "Virtualized NVIDIA H200-SXM-141GB": "h200-sxm-141gb", "NVIDIA B200-SXM-180GB": "b200-180gb",
    "NVIDIA GB200": "gb200-186gb", "NVIDIA GB300": "gb300-288gb",
    "AMD Instinct MI300X 192GB HBM3": "mi300x-192gb", "AMD Instinct MI325X 256GB HBM3e": "mi325x-256gb",
    "AMD Instinct MI325X 256GB HBM3E": "mi325x-256gb", "AMD Instinct MI355X 288GB HBM3e": "mi355x-288gb",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-96gb", "NVIDIA L40S": "l40s-48gb",
}
DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")


def show(git_dir: Path, path: str) -> str | None:
    out = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def parse_log(text: str) -> dict:
    """Numbers of one mlperf_log_summary.txt, by their label (ns values kept in ns)."""
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and re.fullmatch(r"\s*-?[0-9.]+\s*", value):
            values[" ".join(name.split()).lower()] = float(value)
    return values


def tokens_per_s(log: dict) -> float | None:
    """Server and Interactive logs say 'Completed tokens per second', Offline ones 'Tokens per second'."""
    return log.get("completed tokens per second") or log.get("tokens per second")


def samples_per_s(log: dict) -> float | None:
    return log.get("completed samples per second") or log.get("samples per second")


def measured(log: dict, scenario: str) -> dict:
    out = {"output_tokens_per_s": tokens_per_s(log), "requests_per_s": samples_per_s(log)}
    if scenario != "Offline":
        for key, label in (("ttft", "first token latency"), ("tpot", "time to output token")):
            out[f"{key}_ms_mean"] = log[f"mean {'first token latency' if key == 'ttft' else 'time to output token'} (ns)"] / 1e6
            out[f"{key}_ms_p50"] = log[f"50.00 percentile {label} (ns)"] / 1e6
            out[f"{key}_ms_p99"] = log[f"99.00 percentile {label} (ns)"] / 1e6
    return {k: round(v, 3) for k, v in out.items() if v}


def engine(software: str) -> tuple[str, str | None]:
    s = software.lower()
    if "tensorrt" in s:
        return "tensorrt-llm", None
    for name in ("vllm", "sglang"):
        m = re.search(rf"{name}[ v]*([0-9][0-9.]*[0-9])", s)
        if name in s:
            return name, m.group(1) if m else None
    return "other", None


def workload_of(log: dict, scenario: str, in_len: int, out_len: int) -> dict:
    """The record's workload: offline over the run's sample count, or Poisson at loadgen's target
    rate for as many queries as its minimum duration issues."""
    workload = {"mode": "offline" if scenario == "Offline" else "poisson", "input_len": in_len, "output_len": out_len}
    if scenario == "Offline":
        workload["num_requests"] = int(log.get("performance_sample_count", 24576))
    else:
        workload["request_rate"] = log["target_qps"]
        workload["num_requests"] = round(log["target_qps"] * log["min_duration (ms)"] / 1e3)
    return workload


def source_of(row: dict, commit: str, log_path: str, conf_path: str | None) -> dict:
    """The record's provenance: the results repository at `commit`, the log summary and the
    engine settings' file."""
    source = {"name": f"MLPerf Inference v5.1 results ({row['Submitter']}), closed division, datacenter",
              "key": f"mlperf-inference-v5.1-{row['Submitter'].lower()}",
              "repo": REPO, "commit": commit, "path": log_path,
              "where": f"performance run_1 log summary; result ID {row['ID']}, system {row['System']!r}",
              "url": row.get("Details"), "confidence": "primary"}
    if conf_path:
        source["config_path"] = conf_path
    return source


def notes_of(row: dict, gpus: int, in_note: str, serving: dict, settings_note: str) -> str:
    """How each value of the record was derived."""
    notes = (f"Software: {row['Software']}. Measured values from the loadgen log summary: output tokens/s = "
             f"'(Completed) tokens per second' (whole system, {gpus} GPUs); requests/s = '(Completed) samples "
             f"per second'; latencies converted from ns. output_len = tokens/s / samples/s (mean generated tokens per "
             f"request of this run). input_len: {in_note} (recalled figure, confidence of the lengths: recalled; the "
             f"real lengths vary per request). ")
    if row["Scenario"] != "Offline":
        notes += (f"{row['Scenario']} scenario: Poisson arrivals at loadgen's target_qps, the run valid only if p99 TTFT <= "
                  f"{serving['slo']['ttft_ms']:.0f} ms and p99 TPOT <= {serving['slo']['tpot_ms']:.0f} ms; "
                  f"num_requests = target_qps x the log's min_duration (queries loadgen issues at least). ")
    return notes + settings_note


def record(git_dir: Path, files: list[str], row: dict, commit: str) -> dict | str:
    """The run record of one summary row, or why it cannot be stated."""
    model, stem = BENCHMARKS[row["Model"]]
    gpu = GPUS.get(row["Accelerator"])
    if gpu is None:
        return f"accelerator {row['Accelerator']!r} is not in meshplan's GPU catalog (or mixes GPU types)"
    log_path = f"{row['Location']}/performance/run_1/mlperf_log_summary.txt"
    text = show(git_dir, log_path)
    if text is None:
        return f"no {log_path}"
    log = parse_log(text)
    if not tokens_per_s(log) or not samples_per_s(log):
        return "the log summary has no tokens/s or samples/s"
    name, version = engine(row["Software"])
    per_gpu, nodes = int(row["a#"]), int(row["Nodes"] or 1)
    found = engine_settings(lambda path: show(git_dir, path), files, row, stem, gpu, name, per_gpu * nodes)
    knobs = found.knobs
    wdt = next((d for d in DTYPES if d in row.get("weight_data_types", "").lower()), None)
    if found.precision in DTYPES:
        wdt = found.precision
    out_len = round(tokens_per_s(log) / samples_per_s(log))
    in_len, in_note = INPUT_MEAN[model]
    hardware = {"gpu": gpu, "num_gpus": per_gpu * nodes, "gpus_per_node": per_gpu}
    if "NVL72" in row["Platform"] or "NVL72" in row["System"]:
        hardware["scale_up_domain"] = 72
    scenario = row["Scenario"]
    workload = workload_of(log, scenario, in_len, out_len)
    serving = {"engine": name, "engine_version": found.engine_version or version, "tp": knobs.pop("tp", None),
               "pp": knobs.pop("pp", None), "replicas": knobs.pop("replicas", None), "weights_dtype": wdt,
               "activations_dtype": wdt if wdt in ("fp8", "fp4") else None,
               "kv_cache_dtype": knobs.pop("kv_cache_dtype", None), **knobs, "workload": workload}
    if scenario != "Offline":
        serving["slo"] = {"ttft_ms": log["ttft_latency (ns)"] / 1e6, "tpot_ms": log["tpot_latency (ns)"] / 1e6,
                          "percentile": 99}
    serving = {k: v for k, v in serving.items() if v is not None}
    rid = re.sub(r"[^a-z0-9.]+", "-", f"mlperf51-{row['Submitter']}-{row['Platform']}-{row['Model']}-{scenario}".lower())
    source = source_of(row, commit, log_path, found.path)
    notes = notes_of(row, per_gpu * nodes, in_note, serving, found.note)
    return {"id": rid, "kind": "serving", "source": source, "model": model, "hardware": hardware,
            "serving": serving, "measured": measured(log, scenario), "notes": notes}


def main(git_dir: str) -> None:
    git_dir = Path(git_dir)
    commit = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    files = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", "HEAD", "--", "closed"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    rows = [r for r in json.loads(show(git_dir, "summary_results.json"))
            if r["Model"] in BENCHMARKS and r["Category"] == "closed" and r["Suite"] == "datacenter"]
    records, left_out, seen = [], [], set()
    for row in rows:
        rec = record(git_dir, files, row, commit)
        if isinstance(rec, str):
            left_out.append(f"{row['ID']} {row['Submitter']} {row['Platform']} {row['Model']} {row['Scenario']}: {rec}")
        elif rec["id"] not in seen:
            seen.add(rec["id"])
            records.append(rec)
    header = [f"# MLPerf Inference v5.1, closed division, datacenter: every Llama 2 70B and Llama 3.1 405B result of",
              f"# github.com/{REPO} at {commit} (summary_results.json), as serving run records.",
              "# Held out: the serving fit never reads this file. Generated by scripts/mlperf_serving_records.py.",
              f"# {len(records)} records; results the schema cannot state ({len(left_out)}):"]
    header += [f"#   {line}" for line in left_out]
    text = "\n".join(header) + "\n" + yaml.safe_dump({"schema": 1, "records": records}, sort_keys=False, width=120)
    OUT.write_text(text)
    print(f"{len(records)} records, {len(left_out)} left out -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
