"""Sanity of the plan search against published practice: for each training record, does the
plan meshplan picks (same framework, GPUs, sequence and batch) predict at least the throughput
of the published layout, and where does the published layout rank among the searched plans?
Saves benchmarks/results/plan_sanity.json and re-renders the page block that quotes it.
Run: python benchmarks/plan_sanity.py"""

from __future__ import annotations

import time

from meshplan.records import CALIBRATION
from meshplan.training.choose import best_plan
from meshplan.training.search.plans import search
from meshplan.validate.records import load_records
from meshplan.validate.training_records import training_case

import readme_blocks  # benchmarks/readme_blocks.py

RECORDS = CALIBRATION["training"]
SEARCHABLE = ("megatron", "nemo", "torchtitan", "deepspeed")


def key(plan) -> tuple:
    return (plan.tp, plan.pp, plan.cp, plan.ep)


def main() -> None:
    start = time.perf_counter()
    at_least = total = top10 = 0
    for record in load_records(RECORDS):
        case = training_case(record)
        if case.plan.framework not in SEARCHABLE or case.open_layout:
            continue
        published = best_plan(case.plan, case.model, case.cluster)
        base = case.plan.model_copy(update={"tp": 1, "pp": 1, "vpp": None, "cp": 1, "ep": 1,
                                            "dp": None, "micro_batch_size": None,
                                            "pipeline_split": None})
        result = search(case.model, case.cluster, base, {}, top=50)
        total += 1
        if not result.ranked:
            print(f"  no plan fits: {record.id}")
            continue
        best = result.ranked[0].tokens_per_s_per_gpu
        ok = best >= published.tokens_per_s_per_gpu * 0.999 or not published.memory.fits
        at_least += ok
        ranks = [i for i, e in enumerate(result.ranked, 1) if key(e.plan) == key(published.plan)]
        top10 += bool(ranks and ranks[0] <= 10)
        if not ok:
            print(f"  search below published: {record.id} {best:.0f} < "
                  f"{published.tokens_per_s_per_gpu:.0f} tok/s/GPU")
    print(f"{at_least}/{total} records: the searched plan predicts at least the published "
          f"layout's throughput; published tp/pp/cp/ep in the top 10 for {top10}/{total} "
          f"({time.perf_counter() - start:.0f} s)")
    readme_blocks.save("plan_sanity", {"at_least": at_least, "total": total, "top10": top10})


if __name__ == "__main__":
    main()
