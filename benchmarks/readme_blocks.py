"""The generated blocks of the README and the documentation pages: each benchmark saves its
figures to benchmarks/results/NAME.json and this module rewrites the text between
`<!-- BEGIN GENERATED: block -->` and `<!-- END GENERATED: block -->` from those files, in
whichever of README.md and docs/**/*.md holds the block (each block stands in exactly one of
them; `python benchmarks/readme_blocks.py` re-renders them all without running a benchmark).
tests/test_readme_generated.py re-renders every block from the committed files and fails when
a page differs, so a quoted figure is always the one a benchmark printed. Rendering is pure
formatting: no figure is computed here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from readme_cells import ACCURACY_ALIGN, ACCURACY_HEADER, band_cell, md_table, med_p90, pct, spct
from readme_serving import (render_serving_accuracy, render_serving_groups, render_serving_holdout,
                            serving_held_out_rows)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ROOT = HERE.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MARKER = re.compile(r"^(<!-- BEGIN GENERATED: ([\w-]+) -->\n)(.*?)^(<!-- END GENERATED: \2 -->)$", re.S | re.M)
"""A generated block: its markers stand on lines of their own."""


HELD_OUT_NAMES = {"megatron-bridge": "Megatron-Bridge", "small-models": "small models (GPT-2 class)",
                  "moe-training": "MoE", "blackwell-training": "Blackwell, other labs"}
"""Held-out record files (src/meshplan/records/held-out/NAME.yaml) as the tables name them."""


def render_training_accuracy(acc: dict, holdout: dict) -> str:
    """Accuracy table of the step-time model: in-sample, leave-one-source-out, held out, per metric."""
    t, loso, m = acc["tokens_per_s_per_gpu"], acc["leave_one_source_out"], acc["by_metric"]
    rows = [[f"tokens/s per GPU, in-sample ({t['n']} records)", *med_p90(t), "8% / 20%"],
            [f"tokens/s per GPU, leave-one-source-out ({loso['n']})", *med_p90(loso), "median 12%"],
            *[[f"held out, {HELD_OUT_NAMES.get(name, name)}: {f['summary']['n']} runs never fitted",
               *med_p90(f["summary"]), ""] for name, f in holdout["files"].items()],
            [f"step time ({m['step_time_s']['n']} records that publish it)", *med_p90(m["step_time_s"]), ""],
            [f"peak memory ({m['peak_memory_gib']['n']} records)", *med_p90(m["peak_memory_gib"]), ""]]
    table = md_table(ACCURACY_HEADER, ACCURACY_ALIGN, rows)
    sources = ", ".join(f"{s['source']} {pct(s['median_abs_rel_error'])} ({s['n']})"
                        for s in sorted(acc["by_source"], key=lambda s: s["median_abs_rel_error"]))
    kind = "leave-one-source-out" if acc["loso_by_source"] else "in-sample"
    return (f"{table}\n\nMedian absolute error per source ({kind}; records in brackets): "
            f"{sources}. The leave-one-source-out row is what `meshplan calibrate --loso` stored "
            f"with the fitted constants ({loso['date']}).\n")


def render_memory_accuracy(mem: dict) -> str:
    """Peak memory per published run, measured against predicted."""
    rows = [[r["label"], f"{r['measured_gib']:.1f}", f"{r['predicted_gib']:.1f}", spct(r["rel_error"])]
            for r in mem["rows"] if r["measured_gib"] is not None]
    table = md_table(["record", "measured GiB", "predicted GiB", "error"],
                   ["---", "---:", "---:", "---:"], rows)
    errs = [abs(r["rel_error"]) for r in mem["rows"] if r["rel_error"] is not None]
    within = sum(e <= 0.10 for e in errs)
    ooms = sum(r["measured_oom"] is True for r in mem["rows"])
    oom_text = (f" Of {ooms} runs reported out of memory, {mem['oom_predicted']} are predicted not to fit."
                if ooms else "")
    return (f"{table}\n\nMedian absolute error {pct(mem['median_abs_rel_error'])}; {within} of "
            f"{len(errs)} within 10%.{oom_text}\n")


def render_plan_search_speed(d: dict) -> str:
    """One sentence per case: median in-process time of the search; the CLI's wall time."""
    order = d.get("order", list(d["cases"]))  # the benchmark's order (the file's keys are sorted)
    parts = [f"{name}: median {c['median_s']:.2f} s in-process (fastest {c['min_s']:.2f} s; "
             f"{c['candidates']:,} candidates, {c['evaluated']:,} costed, {c['rejected_memory']:,} of "
             f"them out of memory; about {c['candidates_per_s']:,.0f} candidates/s)"
             for name, c in ((n, d["cases"][n]) for n in order)]
    return (f"Speed (`python benchmarks/plan_search_speed.py`, each search in a fresh process, median of "
            f"{d['runs']}): " + "; ".join(parts) + f". The command line takes {d['cli_s']:.2f} s with "
            f"start-up for {d['cli_case'].split(' on ')[0]} (default `--workers`: the CPUs it may use).\n")


def render_plan_sanity(d: dict) -> str:
    """One sentence: the searched plan against published layouts."""
    return (f"Against published practice (`python benchmarks/plan_sanity.py`): for {d['at_least']} of the "
            f"{d['total']} training records with a searchable framework and a published layout, the plan "
            f"meshplan picks (same framework, GPUs, sequence length and batch) predicts at least the "
            f"throughput of the published layout; the published tp/pp/cp/ep is among the 10 best "
            f"searched plans for {d['top10']} of them.\n")


def render_estimate_speed(d: dict) -> str:
    """One sentence: time of one step estimate."""
    return (f"Speed (`python benchmarks/estimate_speed.py`): one estimate of {d['case']} takes "
            f"{d['median_ms_without_memory']:.2f} ms (median of {d['runs']}), "
            f"{d['median_ms_with_memory']:.2f} ms with the memory model.\n")


def render_serving_speed(d: dict) -> str:
    """One sentence: simulated seconds and requests per wall second."""
    return (f"Speed (`python benchmarks/serving_speed.py`): {d['requests']:,} requests ({d['case']}; "
            f"{d['iterations']:,} iterations, {d['simulated_s']:,.0f} simulated seconds) take "
            f"{d['wall_s']:.1f} s in one process: about {d['simulated_s'] / d['wall_s']:,.0f} simulated "
            f"seconds and {d['requests'] / d['wall_s']:,.0f} requests per wall second.\n")


def render_serving_scale(d: dict) -> str:
    """A table: wall time and peak RSS per request count, streamed and exact, by arrivals (rows
    saved before offline rows were added carry no `arrival`: they are the Poisson case)."""
    rows = [[f"{r['requests']:,}", r["mode"], r.get("arrival", "poisson"), f"{r['wall_s']:,.0f} s",
             f"{r['peak_rss_mib']:,.0f} MiB", f"{r['requests'] / r['wall_s']:,.0f}",
             f"{r['simulated_s'] / 3600:,.1f} h"] for r in d["rows"]]
    table = md_table(["requests", "metrics", "arrivals", "wall time", "peak RSS", "requests per wall s",
                    "simulated traffic"], ["---:", "---", "---", "---:", "---:", "---:", "---:"], rows)
    return (f"A day of traffic (`python benchmarks/serving_scale.py --full`; {d['case']}; each run in a "
            f"fresh process, wall time on a shared 2-core machine):\n\n{table}\n")


def render_serving_plan_speed(d: dict) -> str:
    """One sentence: wall time and pruning of the benchmark serve plan."""
    return (f"The benchmark (`python benchmarks/serving_plan_speed.py`: {d['case']}) takes "
            f"{d['wall_s']:.0f} s with {d['workers']} workers: {d['simulated']} plans simulated "
            f"({d['simulations']} simulations), {d['pruned']} pruned analytically.\n")


def render_startup_speed(d: dict) -> str:
    """One sentence: wall time of fresh processes."""
    cases = ", ".join(f"`{name}` {seconds:.2f} s" for name, seconds in d["median_wall_s"].items())
    return (f"Start-up (`python benchmarks/startup_speed.py`, median wall time of {d['runs']} fresh "
            f"processes): {cases}.\n")


def render_site_calibration(d: dict) -> str:
    """A table: median / p90 error of held-out runs per number of calibration runs k."""
    header = ["runs fitted on (k)", "training tokens/s & step time", "serving metrics"]
    rows = []
    for k in ["uncalibrated", *map(str, d["ks"])]:
        label = "0 (leave-one-source-out model)" if k == "uncalibrated" else k
        rows.append([label] + [" / ".join(med_p90(d[kind]["summary"][k])) for kind in ("training", "serving")])
    table = md_table(header, ["---", "---:", "---:"], rows)
    return (f"{table}\n\nMedian / p90 absolute error of the runs not fitted on, over "
            f"{d['training']['groups']} training and {d['serving']['groups']} serving (source, GPU) "
            f"groups with at least {d['min_runs']} runs, {d['draws']} random draws per k; "
            f"{d['serving'].get('set_aside', 0)} serving runs their own source flags are set aside. "
            f"Spread of one run's log error within a group / between groups: training "
            f"{d['training']['spreads']['within']:.2f} / {d['training']['spreads']['between']:.2f}, serving "
            f"{d['serving']['spreads']['within']:.2f} / {d['serving']['spreads']['between']:.2f} "
            f"(`python benchmarks/site_calibration.py`).\n")


def render_validate_speed(d: dict) -> str:
    """One sentence: wall time of validate on both calibration files."""
    parts = []
    for workers, times in d["wall_s"].items():
        parts.append(f"{sum(times.values()):.0f} s with {workers} worker{'s' if workers != '1' else ''} "
                     f"(training {times['training']:.0f} s, serving {times['serving']:.0f} s)")
    return (f"Speed (`python benchmarks/validate_speed.py`, {d['cores']} cores): `meshplan validate` on both "
            f"calibration files takes {'; '.join(parts)}.\n")


def render_sweep_speed(d: dict) -> str:
    """One sentence: searches per second of a sweep per backend."""
    parts = [f"{name} {r['cells'] / r['seconds']:.1f} searches/s ({r['cells']} searches in {r['seconds']:.0f} s)"
             for name, r in d["results"].items()]
    return (f"Sweep speed (`python benchmarks/sweep_speed.py`, {d['workers']} workers on this machine): "
            f"{', '.join(parts)}.\n")


def render_ui_load(d: dict) -> str:
    """Two sentences: estimate latency under a burst, and the plan-search jobs' completion."""
    e, s = d["estimates"], d["searches"]
    during = s["estimates_during"]
    return (f"Load (`python benchmarks/ui_load.py`, a loopback server on this {d['cores']}-core machine, "
            f"load average {d['load_average']:.1f} from other work when it ran): {e['n']} concurrent step "
            f"estimates (all different plans) answer in p50 {e['p50_s'] * 1e3:.0f} ms, p99 "
            f"{e['p99_s'] * 1e3:.0f} ms (target p99 < {d['target_p99_s'] * 1e3:.0f} ms; one at a time "
            f"each takes p50 {e['one_at_a_time']['p50_s'] * 1e3:.0f} ms), {e['ok']} of {e['n']} "
            f"answered; the same burst sent through httpx, whose client costs more CPU on these two "
            f"cores than the server's answer, measures p50 {e['httpx']['p50_s'] * 1e3:.0f} ms, p99 "
            f"{e['httpx']['p99_s'] * 1e3:.0f} ms. {s['submitted']} plan "
            f"searches submitted at once: {s['done_with_plans']} done with plans, "
            f"{s['failed_or_cancelled']} lost, each running {min(s['run_s']):.1f}-{max(s['run_s']):.1f} s "
            f"after queueing up to {max(s['queued_s']):.1f} s, all in {s['wall_s']:.1f} s; estimates sent "
            f"meanwhile answer in p50 {during['p50_s'] * 1e3:.0f} ms, p99 {during['p99_s'] * 1e3:.0f} ms.\n")


def render_validated_against(acc: dict, holdout: dict, mem: dict, serving: dict) -> str:
    """The README's one table: each predicted quantity, what it was measured against, the error."""
    t, loso, m = acc["tokens_per_s_per_gpu"], acc["leave_one_source_out"], acc["by_metric"]
    measured = [r for r in mem["rows"] if r["measured_gib"] is not None]
    out, engines = serving["by_metric"]["output_tokens_per_s"], serving["engines"]
    mix = ", ".join(f"{n} {e}" for e, n in sorted(engines.items(), key=lambda kv: -kv[1]))
    calib = holdout["calibration_band_coverage"]
    rows = [
        ["training tokens/s per GPU", f"{t['n']} published runs from {len(acc['by_source'])} sources "
         "(the constants are fitted on them)", *med_p90(t), ""],
        ["training tokens/s per GPU, each source left out of the fit", f"the same {loso['n']} runs",
         *med_p90(loso), pct(calib["throughput"], 0)],
        *[[f"training tokens/s per GPU, held out: {HELD_OUT_NAMES.get(name, name)}",
           f"{f['summary']['n']} runs never fitted on", *med_p90(f["summary"]), band_cell(f["band"]["all"])]
          for name, f in holdout["files"].items()],
        ["training step time", f"{m['step_time_s']['n']} runs that publish it", *med_p90(m["step_time_s"]), ""],
        ["peak memory per GPU", f"{len(measured)} runs that measured it", pct(mem["median_abs_rel_error"]),
         pct(mem["p90_abs_rel_error"]), pct(calib["memory"], 0)],
        ["serving output tokens/s", f"{out['n']} values of {serving['simulated']} published benchmarks "
         f"({mix}) on {len(serving['by_gpu'])} GPU models", *med_p90(out), ""],
        ["serving, every published metric, each source left out",
         f"{(serving['leave_one_source_out'] or serving['all'])['n']} values from {len(serving['by_source'])} sources",
         *med_p90(serving["leave_one_source_out"]), ""],
        *serving_held_out_rows(serving),
    ]
    return md_table(["predicted", "measured in", "median abs. error", "p90 abs. error",
                   "inside the p10-p90 band"], ["---", "---", "---:", "---:", "---:"], rows) + "\n"


@dataclass(frozen=True, slots=True)
class Block:
    """A generated block: the result files it is rendered from and the scripts that write them."""

    sources: tuple[str, ...]
    render: Callable[..., str]

    def scripts(self) -> str:
        return " and ".join(f"`python benchmarks/{s}.py`" for s in self.sources)


BLOCKS: dict[str, Block] = {
    "validated_against": Block(("training_accuracy", "training_holdout", "memory_accuracy", "serving_accuracy"),
                               render_validated_against),
    "training_accuracy": Block(("training_accuracy", "training_holdout"), render_training_accuracy),
    "memory_accuracy": Block(("memory_accuracy",), render_memory_accuracy),
    "serving_accuracy": Block(("serving_accuracy",), render_serving_accuracy),
    "serving_groups": Block(("serving_accuracy",), render_serving_groups),
    "serving_holdout": Block(("serving_holdout",), render_serving_holdout),
    "plan_search_speed": Block(("plan_search_speed",), render_plan_search_speed),
    "plan_sanity": Block(("plan_sanity",), render_plan_sanity),
    "estimate_speed": Block(("estimate_speed",), render_estimate_speed),
    "serving_speed": Block(("serving_speed",), render_serving_speed),
    "serving_plan_speed": Block(("serving_plan_speed",), render_serving_plan_speed),
    "serving_scale": Block(("serving_scale",), render_serving_scale),
    "startup_speed": Block(("startup_speed",), render_startup_speed),
    "site_calibration": Block(("site_calibration",), render_site_calibration),
    "validate_speed": Block(("validate_speed",), render_validate_speed),
    "sweep_speed": Block(("sweep_speed",), render_sweep_speed),
    "ui_load": Block(("ui_load",), render_ui_load),
}


def load(name: str, results: Path = RESULTS) -> dict | None:
    """The committed result file of a benchmark, or None if it was never run."""
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def render(name: str, results: Path = RESULTS) -> str | None:
    """A block's text from its result files, or None while one of them is missing."""
    block = BLOCKS[name]
    data = [load(s, results) for s in block.sources]
    return None if any(d is None for d in data) else block.render(*data)


def rewrite(text: str, results: Path = RESULTS) -> str:
    """A page's text with every known block re-rendered (blocks without results are kept)."""
    def sub(m: re.Match) -> str:
        name = m.group(2)
        body = render(name, results) if name in BLOCKS else None
        return m.group(0) if body is None else f"{m.group(1)}{body}{m.group(4)}"
    return MARKER.sub(sub, text)


def blocks_in(text: str) -> dict[str, str]:
    """Name -> current body of every generated block in a page's text."""
    return {m.group(2): m.group(3) for m in MARKER.finditer(text)}


def pages(root: Path = ROOT) -> list[Path]:
    """The files that may hold generated blocks: README.md and every docs/**/*.md."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def locate(root: Path = ROOT) -> dict[str, Path]:
    """Block name -> the page that holds it; a block found in two places is an error."""
    found: dict[str, Path] = {}
    for page in pages(root):
        for m in MARKER.finditer(page.read_text()):
            name = m.group(2)
            if name in found:
                raise ValueError(f"generated block {name!r} is in {found[name]} and in {page}")
            found[name] = page
    return found


def rewrite_pages(results: Path = RESULTS, root: Path = ROOT) -> list[Path]:
    """Re-render every block of every page from the result files; the pages that changed."""
    locate(root)  # refuse duplicated blocks before writing anything
    changed = []
    for page in pages(root):
        text = page.read_text()
        new = rewrite(text, results)
        if new != text:
            page.write_text(new)
            changed.append(page)
    return changed


def save(name: str, data: dict, root: Path = ROOT) -> None:
    """Write a benchmark's result file and re-render the blocks that quote it, wherever they are."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    changed = rewrite_pages(RESULTS, root)
    where = ", ".join(str(p.relative_to(root)) for p in changed) or "no page changed"
    print(f"wrote benchmarks/results/{name}.json and re-rendered the blocks that quote it ({where})")


def main() -> None:
    """Re-render every generated block from the committed result files (no benchmark is run)."""
    changed = rewrite_pages()
    print("generated blocks " + ("rewritten in " + ", ".join(str(p.relative_to(ROOT)) for p in changed)
                                 if changed else "already current"))


if __name__ == "__main__":
    main()
