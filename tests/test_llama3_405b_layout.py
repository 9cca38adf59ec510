"""Meta's Llama 3.1 405B layout (arXiv 2407.21783, section 3.3.2 and Table 4) runs on 80 GB H100s.

16,384 H100-80GB, TP 8, CP 1, PP 16, DP 128, 8K sequences, 16M tokens per step (global batch
2048, 16 per DP rank), 126 layers with one fewer on the first and the last stage, interleaved
schedule, no activation checkpointing, FSDP sharding optimizer states and gradients (weights kept
gathered between forward and backward): dp_sharding='gradients' in meshplan's terms.
"""

from __future__ import annotations

import pytest

from meshplan import Cluster, load_model
from meshplan.training import PlanError, TrainingPlan, estimate_memory, resolve_plan
from meshplan.training.choose import best_plan

GIB = 2**30
L405 = load_model("llama-3.1-405b")
CLUSTER = Cluster.build("h100-sxm-80gb", 16384)
META = dict(tp=8, pp=16, seq_len=8192, global_batch_size=2048, micro_batch_size=1,
            dp_sharding="gradients", framework="megatron")
SPLITS = {1: (7,) + (8,) * 14 + (7,), 4: (1,) + (2,) * 62 + (1,)}


def memory(vpp, **fields):
    plan = TrainingPlan(**{**META, "vpp": vpp, "pipeline_split": SPLITS[vpp], **fields})
    return estimate_memory(L405, CLUSTER, resolve_plan(plan, L405, CLUSTER))


@pytest.mark.parametrize(("vpp", "peak_gib"), [(1, 73.1), (4, 77.2)])
def test_meta_layout_fits_with_its_fsdp_gradient_sharding(vpp, peak_gib):
    est = memory(vpp)
    assert est.fits
    assert est.peak_stage.stage == 1  # 8 layers and (nearly) every micro-batch in flight
    assert est.peak_bytes / GIB == pytest.approx(peak_gib, abs=0.15)
    assert est.peak_stage.gradients_bytes / GIB < 0.2  # fp32 grads sharded over dp=128


@pytest.mark.parametrize(("vpp", "peak_gib"), [(1, 83.9), (4, 88.0)])
def test_megatron_distributed_optimizer_alone_does_not_fit(vpp, peak_gib):
    # ZeRO-1 keeps the full fp32 gradient buffer (4 B x 3.2 G params / tp 8 = 11.9 GiB): the
    # honest number without Meta's gradient sharding.
    est = memory(vpp, dp_sharding="optimizer")
    assert not est.fits
    assert est.peak_bytes / GIB == pytest.approx(peak_gib, abs=0.15)


def test_last_stage_holds_logits_of_its_head_chunk_only():
    # Interleaved: the LM-head chunk's forward is followed by its backward, so one micro-batch's
    # logits are held, as with 1F1B (not the 12 micro-batches of the stage's other chunks).
    last1, last4 = memory(1).stages[-1], memory(4).stages[-1]
    assert last4.logits_bytes == pytest.approx(last1.logits_bytes)
    assert last4.logits_bytes / GIB < 2.0


def test_train_estimate_chooses_the_split_and_a_fitting_vpp():
    plan = TrainingPlan(**{**META, "micro_batch_size": None})
    est = best_plan(plan, L405, CLUSTER)
    assert est.memory.fits
    assert est.plan.vpp in (1, 2, 4)
    assert "pipeline_split" in est.plan.chosen and "vpp" in est.plan.chosen
    sizes = [len(c) for c in est.plan.chunk_layers]
    assert sizes[0] == sizes[-1] == sizes[1] - 1 and len(set(sizes[1:-1])) == 1


def test_train_estimate_names_the_uneven_split_not_the_micro_batch():
    with pytest.raises(PlanError, match=r"pp=16 x vpp=3 = 48 pipeline chunks cannot split the 126 "
                                        r"layers of llama-3.1-405b .*--pipeline-split"):
        best_plan(TrainingPlan(**{**META, "vpp": 3}), L405, CLUSTER)
