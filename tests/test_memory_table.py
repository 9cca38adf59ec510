"""The `train memory` table's columns add up to its total (#34 item 5: a user saw 79.7 vs 76.3 GiB,
the last stage's logits counted in their own column and again inside `other`), over many
configurations: pipeline stages with different peaks, offload, recompute, fine-tuning, MoE."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.cli.memory_table import maxima_note, rounded_cells, stage_parts
from meshplan.errors import MeshplanError
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan

GIB = 2**30
MODELS = {name: load_model(name) for name in ("llama-3.2-1b", "llama-3.1-8b", "qwen3-30b-a3b",
                                              "mixtral-8x7b", "gemma-2-9b")}
runner = CliRunner()


@st.composite
def configurations(draw):
    model = draw(st.sampled_from(sorted(MODELS)))
    method = draw(st.sampled_from(["full", "full", "lora", "qlora"]))
    framework = "hf" if method == "qlora" else draw(st.sampled_from(["megatron", "torchtitan", "deepspeed"]))
    fields = dict(
        tp=draw(st.sampled_from([1, 2, 4])), pp=draw(st.sampled_from([1, 2, 4])),
        seq_len=draw(st.sampled_from([1024, 4096, 8192])),
        micro_batch_size=draw(st.sampled_from([1, 2, 4])),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        dp_sharding=draw(st.sampled_from(["none", "optimizer", "gradients", "full"])),
        offload_optimizer=draw(st.booleans()), offload_activations=draw(st.booleans()),
        method=method, framework=framework,
    )
    if model in ("qwen3-30b-a3b", "mixtral-8x7b"):
        fields["ep"] = draw(st.sampled_from([1, 2]))
    return model, draw(st.sampled_from([8, 16, 32])), fields


def _estimate(model: str, gpus: int, fields: dict):
    spec, cluster = MODELS[model], Cluster.build("h100-sxm-80gb", gpus)
    try:
        return estimate_memory(spec, cluster, resolve_plan(TrainingPlan(**fields), spec, cluster))
    except (MeshplanError, ValueError):  # an impossible layout or an unsupported combination
        assume(False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(configurations())
def test_parts_add_up_to_the_total_in_bytes_and_as_printed(config):
    estimate = _estimate(*config)
    for stage in estimate.stages:
        parts = stage_parts(stage)
        assert sum(parts.values()) == pytest.approx(stage.total_bytes, rel=1e-12)
        cells = rounded_cells(parts, stage.total_bytes)
        *shown, total = (round(float(c) * 10) for c in cells)
        assert sum(shown) == total  # the printed parts add up to the printed total
        for cell, value in zip(cells, parts.values()):
            assert abs(float(cell) - value / GIB) < 0.1 + 1e-9  # each within one printed digit
    summed = sum(max(stage_parts(s)[k] for s in estimate.stages) for k in stage_parts(estimate.stages[0]))
    note = maxima_note(estimate.stages)
    assert (note is not None) == (summed - estimate.peak_bytes >= 0.05 * GIB)


def test_the_docs_example_adds_up_and_says_why_the_maxima_do_not():
    """The memory page's example: the last stage's row held logits twice (45.7 printed vs 44.0)."""
    args = ["train", "memory", "--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64",
            "--tp", "8", "--pp", "4", "--vpp", "2", "--seq-len", "8192", "--global-batch-size", "128",
            "--recompute", "selective"]
    out = runner.invoke(app, args).stdout
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+[\d.]+\s+[\d.]", line)]
    assert len(rows) == 4
    for row in rows:
        *parts, total = (round(float(x) * 10) for x in row[3:])
        assert sum(parts) == total, row
    assert "not the sum of per-column maxima" in out and "logits on stage 3" in out
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    for stage in data["stages"]:
        named = ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
                 "activations_bytes", "logits_bytes", "other_bytes")
        assert sum(stage[k] for k in named) == pytest.approx(stage["total_bytes"], rel=1e-12)
