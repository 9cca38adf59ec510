"""Exit codes: 0 = answered and fits/feasible, 1 = answered but does not fit / no plan / SLOs not
met (the answer is still printed), 2 = bad input (one `error:` line)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()
H100 = ("--gpu", "h100-sxm-80gb")


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("command", ["memory", "estimate"])
def test_train_memory_and_estimate_exit_1_when_the_plan_does_not_fit(command):
    fits = run("train", command, "--model", "llama-3.1-8b", *H100, "--num-gpus", "8", "--recompute", "full")
    assert fits.exit_code == 0, fits.output
    too_big = run("train", command, "--model", "llama-3.1-70b", *H100, "--num-gpus", "1", "--json")
    assert too_big.exit_code == 1, too_big.output
    data = json.loads(too_big.stdout)  # the answer is printed before exiting 1
    assert data


def test_train_memory_table_says_does_not_fit_with_exit_1():
    result = run("train", "memory", "--model", "llama-3.1-70b", *H100, "--num-gpus", "1")
    assert result.exit_code == 1 and "DOES NOT FIT" in result.stdout


def test_train_plan_exit_1_when_no_plan_fits_and_0_when_one_does():
    none = run("train", "plan", "--model", "llama-3.1-405b", *H100, "--num-gpus", "8",
               "--global-batch-size", "8", "--json")
    assert none.exit_code == 1, none.output
    assert json.loads(none.stdout)["plans"] == []
    some = run("train", "plan", "--model", "llama-3.1-8b", *H100, "--num-gpus", "8",
               "--global-batch-size", "64", "--json")
    assert some.exit_code == 0, some.output
    mixed = run("train", "plan", "--model", "llama-3.1-70b", *H100, "--num-gpus", "1,64",
                "--global-batch-size", "64", "--json")
    assert mixed.exit_code == 0, "one size with a plan is an answer"


def test_serve_simulate_exit_1_when_slos_are_not_met():
    base = ("serve", "simulate", "--model", "llama-3.1-8b", *H100, "--num-requests", "100",
            "--request-rate", "5", "--input-len", "256", "--output-len", "32")
    assert run(*base).exit_code == 0
    assert run(*base, "--slo-ttft-ms", "100000").exit_code == 0
    missed = run(*base, "--slo-ttft-ms", "0.01")
    assert missed.exit_code == 1 and "NOT MET" in missed.stdout


@pytest.mark.parametrize("args", [
    ("train", "memory", "--model", "no-such-model", *H100, "--num-gpus", "8"),
    ("train", "memory", "--model", "llama-3.1-8b", *H100, "--num-gpus", "8", "--tp", "3"),
    ("serve", "simulate", "--model", "llama-3.1-8b", *H100, "--slo-ttft-ms", "100",
     "--slo-percentile", "0"),
    # bounds instead of a simulation that would look like a hang (serving/traffic/workload.py MAX_*)
    ("serve", "simulate", "--model", "llama-3.1-8b", *H100, "--num-requests", "1000000000"),
    ("serve", "simulate", "--model", "llama-3.1-8b", *H100, "--input-len", "100000000"),
    ("serve", "plan", "--model", "llama-3.1-8b", *H100, "--max-gpus", "1", "--request-rate", "1",
     "--num-requests", "10000000"),
])
def test_bad_input_exits_2_with_one_error_line(args):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("argv", [[], ["train"], ["serve"], ["gpus"]])
def test_a_group_without_a_command_prints_its_help_and_exits_2(argv, capsys):
    from meshplan.cli import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(" ".join(["Usage: meshplan", *argv])) and "Commands:" in err
