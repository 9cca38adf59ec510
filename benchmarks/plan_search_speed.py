"""Speed of the training plan search (the speed issue's bounds: llama-3.1-405b on 16,384
h100-sxm-80gb, seq 8192, global batch 2048: <= 0.2 s in-process and <= 0.8 s for the CLI, >= 10,000
candidates/s; DeepSeek-V3 on 2,048 H100 with the full tp/pp/vpp/cp/ep/etp space: <= 2 s
in-process). Each search is timed in one process (`workers=1`), and shared with one forked
worker (`workers=2`, the default of `train plan` and of the library on a 2-core machine). Each
search runs in a fresh process (a second search in one process reuses the first one's caches)
and the median of RUNS is reported, since single timings on a shared 2-core machine swing by a
third. Saves benchmarks/results/plan_search_speed.json and re-renders the page block that quotes
it. Run: python benchmarks/plan_search_speed.py"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import readme_blocks  # benchmarks/readme_blocks.py
from startup_speed import ENV, wall  # benchmarks/startup_speed.py: bytecode on, warm-up run

RUNS = 5
CASES = {
    "llama-3.1-405b on 16,384 H100, seq 8192, batch 2048, in one process":
        ("llama-3.1-405b", 16384, 8192, 2048, 1),
    "the same 405B search shared with one forked worker (`--workers 2`, the default of `train "
    "plan` and of the library on this 2-core machine)": ("llama-3.1-405b", 16384, 8192, 2048, 2),
    "DeepSeek-V3 on 2,048 H100, seq 4096, batch 8192 (full tp/pp/vpp/cp/ep/etp space), in one "
    "process": ("deepseek-v3", 2048, 4096, 8192, 1),
    "the same DeepSeek-V3 search shared with one forked worker (`--workers 2`)":
        ("deepseek-v3", 2048, 4096, 8192, 2),
}
SEARCH = """
import json
from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.search.plans import search
r = search(load_model({model!r}), Cluster.build("h100-sxm-80gb", {gpus}, gpus_per_node=8),
           TrainingPlan(seq_len={seq}, global_batch_size={batch}), {{}}, workers={workers})
print(json.dumps({{"seconds": r.seconds, "evaluated": r.evaluated, "rejected_memory": r.rejected_memory,
                  "rejected_invalid": r.rejected_invalid}}))
"""


def one_search(model: str, gpus: int, seq: int, batch: int, workers: int) -> dict:
    code = SEARCH.format(model=model, gpus=gpus, seq=seq, batch=batch, workers=workers)
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=ENV)
    return json.loads(done.stdout.strip().splitlines()[-1])


def case(model: str, gpus: int, seq: int, batch: int, workers: int) -> dict:
    runs = [one_search(model, gpus, seq, batch, workers) for _ in range(RUNS)]
    seconds = [r["seconds"] for r in runs]
    first = runs[0]
    candidates = first["evaluated"] + first["rejected_invalid"]
    median = statistics.median(seconds)
    return {"median_s": median, "min_s": min(seconds), "candidates": candidates,
            "evaluated": first["evaluated"], "rejected_memory": first["rejected_memory"],
            "candidates_per_s": candidates / median}


def cli_wall() -> float:
    """Median wall seconds of the 405B search from the command line, start-up included."""
    return wall([sys.executable, "-m", "meshplan", "train", "plan", "--model", "llama-3.1-405b", "--gpu",
                 "h100-sxm-80gb", "--num-gpus", "16384", "--seq-len", "8192", "--global-batch-size",
                 "2048", "--json"], RUNS)


def main() -> None:
    results = {}
    for name, args in CASES.items():
        results[name] = r = case(*args)
        print(f"{name}: median {r['median_s']:.2f} s in-process (min {r['min_s']:.2f}; {RUNS} fresh "
              f"processes), {r['candidates']:,} candidates, {r['evaluated']:,} costed, "
              f"{r['candidates_per_s']:,.0f} candidates/s")
    cli_s = cli_wall()
    print(f"CLI (405B) with start-up: median {cli_s:.2f} s")
    readme_blocks.save("plan_search_speed", {"runs": RUNS, "cases": results, "order": list(CASES),
                                             "cli_case": next(iter(CASES)), "cli_s": cli_s})


if __name__ == "__main__":
    main()
