"""Defaults that follow from other flags: a fine-tuning method Megatron-LM lacks picks a
framework that runs it (issue #34: `--method qlora` alone used to be an error)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.training.layout.capabilities import default_framework, frameworks_for

runner = CliRunner()
BASE = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8", "--global-batch-size", "64"]


def test_default_framework_is_megatron_unless_the_method_rules_it_out():
    assert default_framework("full") == ("megatron", None)
    framework, note = default_framework("qlora")
    assert framework == frameworks_for("qlora")[0] == "hf" and "megatron has no qlora" in note


@pytest.mark.parametrize("command", [["train", "estimate"], ["train", "memory"], ["train", "plan", "-q"]])
def test_qlora_without_a_framework_runs_on_one_that_has_it(command):
    result = runner.invoke(app, [*command, *BASE, "--method", "qlora", "--json"])
    assert result.exit_code == 0, result.output
    assert "note: framework hf: megatron has no qlora fine-tuning" in result.stderr
    data = json.loads(result.stdout)
    plan = data["plans"][0] if "plans" in data else data["plan"]
    assert plan["framework"] == "hf" and plan["method"] == "qlora"


def test_an_explicit_framework_is_still_checked():
    result = runner.invoke(app, ["train", "estimate", *BASE, "--method", "qlora", "--framework", "megatron"])
    assert result.exit_code == 2 and "qlora" in result.output
