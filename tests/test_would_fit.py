""""would fit with ...": a plan that does not fit names flags that make it fit, and pasting them
into the same command gives FITS with the quoted peak (#34 item 6: "DOES NOT FIT (611 of 80 GiB)"
named no flag)."""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan
from meshplan.training.would_fit import MAX_MEMORY_ESTIMATES, would_fit_with

GIB = 2**30
runner = CliRunner()
CASES = {
    "8b sharding": "--model llama-3.1-8b --gpu h100-sxm-80gb --num-gpus 8 --seq-len 4096 --global-batch-size 64",
    "70b lora on one gpu": "--model llama-3.1-70b --gpu h100-sxm-80gb --num-gpus 1 --method lora --framework hf",
    "405b on one node": "--model llama-3.1-405b --gpu h100-sxm-80gb --num-gpus 8 --tp 8",
    "70b big micro-batch": "--model llama-3.1-70b --gpu h100-sxm-80gb --num-gpus 8 --tp 8 --seq-len 8192 "
                           "--micro-batch-size 4",
}


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("command", ["memory", "estimate"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_hinted_flags_make_the_same_command_fit(command, case):
    args = ["train", command, *shlex.split(CASES[case])]
    data = json.loads(run(*args, "--json").stdout)
    assert not data["fits"] and data["would_fit_with"], data.get("would_fit_with")
    hint = data["would_fit_with"][0]
    assert hint["peak_bytes"] <= hint["gpu_memory_bytes"]
    again = run(*args, *shlex.split(hint["flags"]), "--json")
    fixed = json.loads(again.stdout)
    assert again.exit_code == 0 and fixed["fits"], (hint, again.output[-400:])
    if command == "memory":  # the same plan: the same peak (estimate may pick another micro-batch)
        assert fixed["peak_bytes"] == pytest.approx(hint["peak_bytes"], rel=1e-9)
    assert fixed["would_fit_with"] == []


def test_the_table_prints_pasteable_flags_with_the_peak():
    out = run("train", "memory", *shlex.split(CASES["8b sharding"])).stdout
    lines = [line for line in out.splitlines() if "would fit with" in line]
    assert 1 <= len(lines) <= 2
    assert re.match(r"^  would fit with (--[a-z-]+( [\w.]+)?)+ \(\d+\.\d of 79\.6 GiB, \d+\.\d\d s/step on \d+ GPUs\)$",
                    lines[0]), lines[0]


def test_a_plan_that_fits_gets_no_hint():
    data = json.loads(run("train", "memory", *shlex.split(CASES["8b sharding"]), "--tp", "2", "--json").stdout)
    assert data["fits"] and data["would_fit_with"] == []


def test_the_search_is_bounded_and_fast(monkeypatch):
    """At most MAX_MEMORY_ESTIMATES memory estimates, well under a second."""
    from meshplan.training import would_fit

    calls = []
    real = would_fit.estimate_memory
    monkeypatch.setattr(would_fit, "estimate_memory", lambda *a: calls.append(1) or real(*a))
    spec, cluster = load_model("llama-3.1-405b"), Cluster.build("h100-sxm-80gb", 8)
    plan = TrainingPlan(tp=8)
    resolved = resolve_plan(plan, spec, cluster)
    started = time.perf_counter()
    hints = would_fit_with(spec, cluster, plan, resolved, estimate_memory(spec, cluster, resolved).peak_bytes)
    assert time.perf_counter() - started < 1.0
    assert hints and len(calls) <= MAX_MEMORY_ESTIMATES
