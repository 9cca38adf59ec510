"""Uneven pipeline splits: chunk counts that do not divide the layers get Meta's / Megatron's form
(even middle chunks, the remainder on the first and last), reported as chosen; Meta's published
Llama 3.1 405B layout is plannable and fits on 80 GB H100s.

Source: Llama 3 paper (arXiv 2407.21783), section 3.3.2 and Table 4: 16,384 H100-80GB, TP 8,
CP 1, PP 16, DP 128, sequence 8192, 16M tokens per step, one layer fewer on the first and last
stage, no activation recomputation at 8K, and FSDP sharding optimizer states and gradients
(dp_sharding "gradients" here)."""

from __future__ import annotations

import pytest

from meshplan import Cluster, TrainingPlan, estimate_memory, load_model, resolve_plan
from meshplan.errors import ConfigError
from meshplan.training.choose import best_plan
from meshplan.training.layout.resolve import edge_split

GIB = 2**30


@pytest.mark.parametrize("layers, chunks, split", [
    (126, 16, (7,) + (8,) * 14 + (7,)),
    (126, 64, (1,) + (2,) * 62 + (1,)),
    (9, 4, (1, 3, 3, 2)),
    (32, 1, (32,)),
])
def test_edge_split(layers, chunks, split):
    assert edge_split(layers, chunks) == split
    assert sum(split) == layers and len(split) == chunks


def test_edge_split_refuses_a_chunk_without_layers():
    assert edge_split(5, 4) is None


def _meta_405b(vpp: int, sharding: str = "gradients"):
    model = load_model("llama-3.1-405b")
    cluster = Cluster.build("h100-sxm-80gb", 16384, gpus_per_node=8)
    plan = TrainingPlan(tp=8, pp=16, vpp=vpp, cp=1, seq_len=8192, global_batch_size=2048,
                        micro_batch_size=1, dp_sharding=sharding)
    return model, cluster, plan


@pytest.mark.parametrize("vpp", [1, 4])
def test_meta_405b_layout_resolves_with_the_published_split_and_fits(vpp):
    model, cluster, plan = _meta_405b(vpp)
    resolved = resolve_plan(plan, model, cluster)
    sizes = [len(c) for c in resolved.chunk_layers]
    assert sizes[0] == sizes[-1] == {1: 7, 4: 1}[vpp]
    assert sum(sizes) == 126 and "pipeline_split" in resolved.chosen
    memory = estimate_memory(model, cluster, resolved)
    assert memory.fits, memory.peak_bytes / GIB
    assert 60 * GIB < memory.peak_bytes < 79.6 * GIB  # full activations of 16 in-flight micro-batches


def test_meta_405b_without_gradient_sharding_does_not_fit():
    """Megatron's default distributed optimizer keeps full fp32 gradients (11.9 GiB per stage):
    the layout fits only with the gradients sharded as Meta's FSDP did."""
    model, cluster, plan = _meta_405b(1, "optimizer")
    assert not estimate_memory(model, cluster, resolve_plan(plan, model, cluster)).fits


def test_estimate_with_uneven_pp_chooses_the_split_instead_of_failing():
    model, cluster, plan = _meta_405b(1)
    est = best_plan(plan.model_copy(update={"vpp": None, "micro_batch_size": None}), model, cluster)
    assert "pipeline_split" in est.plan.chosen and est.step_time_s > 0


def test_an_inexpressible_split_names_the_cause_and_offers_pipeline_split():
    model = load_model("llama-3.1-8b")  # 32 layers
    cluster = Cluster.build("h100-sxm-80gb", 64)
    with pytest.raises(ConfigError, match=r"20 pipeline chunks cannot split the 32 layers.*"
                                          r"dividing 32 \(16 or 32\), or give --pipeline-split, e.g. 1,1,"):
        resolve_plan(TrainingPlan(pp=4, vpp=5), model, cluster)
