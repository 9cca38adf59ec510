"""Speed of the training plan search (issue bound: llama-3.1-405b on 16,384 h100-sxm-80gb, seq 8192,
global batch 2048: <= 2 s in-process, <= 4 s for the CLI). Saves benchmarks/results/plan_search_speed.json
and rewrites the README block that quotes it. Run: python benchmarks/plan_search_speed.py"""

from __future__ import annotations

import subprocess
import sys
import time

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.search import search

import readme_blocks  # benchmarks/readme_blocks.py


def main() -> None:
    model = load_model("llama-3.1-405b")
    cluster = Cluster.build("h100-sxm-80gb", 16384, gpus_per_node=8)
    base = TrainingPlan(seq_len=8192, global_batch_size=2048)
    result = search(model, cluster, base, {})
    per_s = (result.evaluated + result.rejected_invalid) / result.seconds
    print(f"in-process: {result.seconds:.2f} s, {result.evaluated} plans evaluated "
          f"({result.rejected_memory} out of memory), {result.rejected_invalid} invalid, "
          f"{per_s:,.0f} candidates/s")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "meshplan", "train", "plan", "--model", "llama-3.1-405b",
                    "--gpu", "h100-sxm-80gb", "--num-gpus", "16384", "--seq-len", "8192",
                    "--global-batch-size", "2048", "--json"], check=True, capture_output=True)
    cli_s = time.perf_counter() - start
    print(f"CLI with start-up: {cli_s:.2f} s")
    readme_blocks.save("plan_search_speed", {
        "case": "llama-3.1-405b on 16,384 H100, seq 8192, batch 2048",
        "in_process_s": result.seconds, "cli_s": cli_s, "evaluated": result.evaluated,
        "rejected_memory": result.rejected_memory, "rejected_invalid": result.rejected_invalid,
        "candidates": result.evaluated + result.rejected_invalid, "candidates_per_s": per_s})


if __name__ == "__main__":
    main()
