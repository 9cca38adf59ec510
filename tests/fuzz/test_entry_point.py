"""The installed `meshplan` entry point (meshplan.cli.main) turns click's usage errors (a bad
flag value, a missing option, an unknown flag) into the same one line as every other bad input."""

from __future__ import annotations

import pytest

from meshplan.cli import main

GPU = ["--gpu", "h100-sxm-80gb"]


@pytest.mark.parametrize("argv, flag", [
    (["serve", "simulate", "--model", "gpt2", *GPU, "--seed", "-1"], "--seed"),
    (["serve", "plan", "--model", "gpt2", *GPU, "--request-rate", "nan", "--slo-ttft-ms", "100"], "--request-rate"),
    (["train", "memory", "--model", "gpt2", *GPU, "--num-gpus", "abc"], "--num-gpus"),
    (["train", "memory", "--model", "gpt2", *GPU], "--num-gpus"),
    (["train", "plan", "--model", "gpt2", *GPU, "--num-gpus", "8", "--top", "0"], "--top"),
    (["gpus", "list", "--bogus"], "--bogus"),
])
def test_usage_errors_are_one_line_with_exit_2(capsys, argv, flag):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and flag in err, err


def test_answers_and_help_keep_their_exit_codes(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["model", "show", "gpt2", "--json"])
    assert stop.value.code == 0 and '"params_total"' in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    with pytest.raises(SystemExit) as stop:
        main(["train"])  # a group without a command: its help page
    assert stop.value.code == 2 and "memory" in capsys.readouterr().out
