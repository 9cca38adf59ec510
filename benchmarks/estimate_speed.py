"""Speed of one step-time estimate (the issue's bound: <= 5 ms for a 126-layer model with
interleaved pipeline parallelism). Saves benchmarks/results/estimate_speed.json and re-renders the page
block that quotes it. Run: python benchmarks/estimate_speed.py"""

from __future__ import annotations

import time

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.estimate import estimate_step

import readme_blocks  # benchmarks/readme_blocks.py

RUNS = 30


def main() -> None:
    model = load_model("llama-3.1-405b")
    cluster = Cluster.build("h100-sxm-80gb", 14336)
    plan = resolve_plan(TrainingPlan(tp=8, pp=14, vpp=3, micro_batch_size=1,
                                     global_batch_size=3584, seq_len=8192), model, cluster)
    medians = {}
    for with_memory in (False, True):
        runs = []
        for _ in range(RUNS):
            start = time.perf_counter()
            estimate_step(model, cluster, plan, with_memory=with_memory)
            runs.append(time.perf_counter() - start)
        runs.sort()
        print(f"llama-3.1-405b, 14336 x h100, tp8 pp14 vpp3, {plan.num_microbatches} micro-batches, "
              f"memory={'on' if with_memory else 'off'}: median {runs[RUNS // 2] * 1e3:.2f} ms, "
              f"best {runs[0] * 1e3:.2f} ms")
        medians[with_memory] = runs[RUNS // 2] * 1e3
    readme_blocks.save("estimate_speed", {
        "case": f"llama-3.1-405b on 14,336 H100 (tp 8, pp 14, vpp 3, {plan.num_microbatches} micro-batches)",
        "runs": RUNS, "median_ms_without_memory": medians[False], "median_ms_with_memory": medians[True]})


if __name__ == "__main__":
    main()
