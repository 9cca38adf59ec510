"""Flags that contradict each other are refused naming both (issue #34: silently ignored, exit 0)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()
DENSE = ("--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8")
PLAN = ("train", "plan", *DENSE, "--global-batch-size", "16")
SWEEP = ("train", "sweep", "--num-gpus", "8")

CASES = {
    "offload params, default sharding": (("train", "estimate", *DENSE, "--offload-params"),
                                         ("--offload-params", "--dp-sharding optimizer", "full")),
    "offload params, zero-1": (("train", "memory", *DENSE, "--offload-params", "--dp-sharding", "optimizer"),
                               ("--offload-params", "--dp-sharding optimizer", "full")),
    "lora rank, full": (("train", "estimate", *DENSE, "--lora-rank", "4"), ("--lora-rank 4", "--method full")),
    "lora targets, full": (("train", "memory", *DENSE, "--lora-targets", "q,v"), ("--lora-targets", "--method full")),
    "plan lora rank, full": ((*PLAN, "--lora-rank", "4"), ("--lora-rank 4", "--method full")),
    "expert skew, dense": (("train", "estimate", *DENSE, "--expert-skew", "zipf:s=1.2"),
                           ("--expert-skew", "--model llama-3.2-1b", "dense")),
    "moe balance, dense": (("train", "estimate", *DENSE, "--moe-balance", "eplb"), ("--moe-balance", "--model")),
    "plan expert skew, dense": ((*PLAN, "--expert-skew", "zipf:s=1.2"), ("--expert-skew", "--model")),
    "shard size, no sharding": (("train", "estimate", *DENSE, "--dp-sharding", "none", "--dp-shard-size", "2"),
                                ("--dp-shard-size 2", "--dp-sharding none")),
    "batch size and tokens": ((*PLAN, "--global-batch-tokens", "65536"),
                              ("--global-batch-size 16", "--global-batch-tokens 65536")),
    "sweep unknown model": ((*SWEEP, "--models", "llama-3.2-1b,nosuch", "--gpus", "h100-sxm-80gb"),
                            ("--models 'nosuch'", "unknown model")),
    "sweep unknown gpu": ((*SWEEP, "--models", "llama-3.2-1b", "--gpus", "h100-sxm-80gb,nogpu"),
                          ("--gpus 'nogpu'", "unknown GPU")),
    "sweep empty name": ((*SWEEP, "--models", "llama-3.2-1b,", "--gpus", "h100-sxm-80gb"), ("--models", "empty")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_conflicting_flags_are_one_line_naming_both(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, words = CASES[case]
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not (tmp_path / "sweep.csv").exists()  # refused before any work


def test_the_consistent_forms_still_run():
    ok = runner.invoke(app, ["train", "memory", *DENSE, "--offload-params", "--dp-sharding", "full"])
    assert ok.exit_code == 0, ok.output
    ok = runner.invoke(app, ["train", "memory", *DENSE, "--dp-sharding", "full", "--dp-shard-size", "2"])
    assert ok.exit_code == 0, ok.output
    lora = runner.invoke(app, ["train", "memory", *DENSE, "--method", "lora", "--framework", "hf",
                               "--lora-rank", "4"])
    assert lora.exit_code in (0, 1), lora.output
