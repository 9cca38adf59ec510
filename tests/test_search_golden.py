"""The plan search's ranking is pinned: the top 10 of four searches (dense, MoE, two frameworks)
with their layouts, tokens/s and peak memory. A speed change to the search or the memory model
(caches, batching) must leave them identical; a model change regenerates them deliberately with
MESHPLAN_UPDATE_GOLDEN=1 python -m pytest tests/test_search_golden.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan
from meshplan.training.search.plans import search

GOLDEN = Path(__file__).parent / "golden" / "search_top10.json"
CASES = {
    "llama-3.1-70b-64-megatron": ("llama-3.1-70b", 64, 4096, 128, "megatron"),
    "mixtral-8x7b-64-megatron": ("mixtral-8x7b", 64, 4096, 256, "megatron"),
    "llama-3.1-8b-16-torchtitan": ("llama-3.1-8b", 16, 8192, 64, "torchtitan"),
    "qwen3-30b-a3b-32-deepspeed": ("qwen3-30b-a3b", 32, 4096, 256, "deepspeed"),
}


def ranked(model: str, gpus: int, seq: int, batch: int, framework: str) -> list[dict]:
    result = search(load_model(model), Cluster.build("h100-sxm-80gb", gpus),
                    TrainingPlan(seq_len=seq, global_batch_size=batch, framework=framework), {}, top=10)
    return [{"layout": [e.plan.tp, e.plan.pp, e.plan.vpp, e.plan.cp, e.plan.ep, e.plan.etp, e.plan.micro_batch_size,
                        e.plan.recompute, e.plan.dp_sharding, e.plan.offload_optimizer],
             "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
             "peak_bytes": e.memory.peak_stage.allocator_bytes} for e in result.ranked]


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps({k: ranked(*v) for k, v in CASES.items()}, indent=1) + "\n")
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case", list(CASES))
def test_top_ten_unchanged(golden, case):
    now, then = ranked(*CASES[case]), golden[case]
    assert [p["layout"] for p in now] == [p["layout"] for p in then]
    for a, b in zip(now, then):
        assert a["tokens_per_s_per_gpu"] == pytest.approx(b["tokens_per_s_per_gpu"], rel=1e-9)
        assert a["peak_bytes"] == pytest.approx(b["peak_bytes"], rel=1e-9)
