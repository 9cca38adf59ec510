"""Every numeric flag has a physical range (cli/ranges.py), shown in its help; a value outside it,
NaN or infinite is one `error:` line naming the flag and the value, exit 2 (issue #34: tracebacks
and nonsense answers with exit 0 before)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan.cli import lazy
from meshplan.cli.app import app
from meshplan.cli.ranges import RANGES

runner = CliRunner()
MODEL = ("--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb")
TRAIN = ("train", "estimate", *MODEL, "--num-gpus", "8")
PLAN = ("train", "plan", *MODEL, "--num-gpus", "8", "--global-batch-size", "16")
SIM = ("serve", "simulate", *MODEL, "--num-requests", "20", "--input-len", "64", "--output-len", "8")
SERVE_PLAN = ("serve", "plan", *MODEL, "--slo-ttft-ms", "1000", "--num-requests", "50")
SWEEP = ("serve", "sweep", *MODEL, "--num-requests", "50")
TRACE = ("--trace", str(Path(__file__).parent / "data/traces/burstgpt_sample.csv"), "--trace-format", "burstgpt")

CASES = {
    # tracebacks before
    "plan tp 0": ((*PLAN, "--tp", "0"), "--tp 0: give a tensor-parallel size of 1 or more"),
    "plan pp 0": ((*PLAN, "--pp", "0"), "--pp 0: give a pipeline-parallel size of 1 or more"),
    "plan cp 0": ((*PLAN, "--cp", "0"), "--cp 0: give a context-parallel size of 1 or more"),
    "plan ep 0": ((*PLAN, "--ep", "0"), "--ep 0: give an expert-parallel size of 1 or more"),
    "plan vpp 0": ((*PLAN, "--vpp", "0"), "--vpp 0: give a virtual pipeline size of 1 or more"),
    "estimate tp 0": ((*TRAIN, "--tp", "0"), "--tp 0: give a tensor-parallel size of 1 or more"),
    "memory vpp 0": (("train", "memory", *TRAIN[2:], "--vpp", "0"), "--vpp 0: give a virtual"),
    "workers huge": ((*PLAN, "--workers", "99999999999999999999"),
                     "--workers 99999999999999999999: give a worker count of at most 1,024"),
    "workers 0": ((*PLAN, "--workers", "0"), "--workers 0: give a worker count of 1 or more"),
    "serve plan rate tiny": ((*SERVE_PLAN, "--request-rate", "1e-300"), "--request-rate 1e-300: give a request rate"),
    "sweep rate tiny": ((*SWEEP, "--rates", "1,1e-300"), "--rates 1e-300: give a request rate of 0.001"),
    "max-nfev 0": (("calibrate", "--records", "training", "--out", "x.yaml", "--max-nfev", "0"),
                   "--max-nfev 0: give an evaluation count of 1 or more"),
    "time-scale huge": ((*SIM, *TRACE, "--time-scale", "1e30"), "--time-scale 1e+30: give a time scale of at most"),
    # nonsense answers with exit 0 before
    "host link tiny": ((*TRAIN, "--host-link-gb-per-s", "1e-300"), "--host-link-gb-per-s 1e-300: give a host link"),
    "nvme huge": ((*TRAIN, "--nvme-tb", "1e30"), "--nvme-tb 1e+30: give an NVMe capacity per node of at most"),
    "host memory huge": ((*TRAIN, "--host-memory-gb", "1e308"), "--host-memory-gb 1e+308: give a host memory"),
    "slo tiny": ((*SIM, "--slo-ttft-ms", "1e-300"), "--slo-ttft-ms 1e-300: give a latency objective of 0.01 ms"),
    "rates nan": ((*SWEEP, "--rates", "nan"), "--rates nan: give a finite number"),
    "rates inf": ((*SWEEP, "--rates", "inf"), "--rates inf: give a finite number"),
    "price negative": ((*PLAN, "--price-per-gpu-hour", "-1"), "--price-per-gpu-hour -1.0: give a price"),
    "price nan": ((*PLAN, "--price-per-gpu-hour", "nan"), "--price-per-gpu-hour nan: give a finite number"),
    "price inf": ((*PLAN, "--price-per-gpu-hour", "inf"), "--price-per-gpu-hour inf: give a finite number"),
    "serve price nan": ((*SERVE_PLAN, "--request-rate", "1", "--price", "h100-sxm-80gb=nan"),
                        "--price 'h100-sxm-80gb=nan': give a finite number"),
    "serve price negative": ((*SERVE_PLAN, "--request-rate", "1", "--price", "h100-sxm-80gb=-2"),
                             "--price 'h100-sxm-80gb=-2': give a price per GPU-hour of 0.0001 USD or more"),
    "num-gpus list": (("train", "plan", *MODEL, "--num-gpus", "8,99999999", "--global-batch-size", "16"),
                      "--num-gpus 99999999: give a GPU count of at most 1,000,000"),
    "request rate nan": ((*SIM, "--request-rate", "nan"), "--request-rate nan: give a finite number"),
}


def one_error_line(args) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_out_of_range_flag_is_one_clear_line(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, expected = CASES[case]
    assert expected in one_error_line(args)


def test_a_config_json_integer_of_5000_digits_is_refused(tmp_path):
    config = json.loads((Path(__file__).parents[1] / "src/meshplan/model/catalog/llama-3.2-1b.json").read_text())
    text = json.dumps(config).replace('"num_hidden_layers": 16', '"num_hidden_layers": ' + "7" * 5000)
    (tmp_path / "config.json").write_text(text)
    line = one_error_line(("model", "show", str(tmp_path / "config.json")))
    assert "5,000 digits" in line and len(line) < 200


def _commands():
    """(path, click command) of every leaf command, loaded as the CLI loads them."""
    out = []

    def walk(command, path):
        if isinstance(command, lazy.LazySubGroup):
            for name in command.list_commands(None):
                walk(lazy.load_sub(command.name, name), (*path, name))
        elif getattr(command, "commands", None):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            out.append((" ".join(path), command))

    for name in lazy.COMMANDS:
        walk(lazy.load(name), (name,))
    return out


LIST_FLAGS = {"rates", "seq_lens", "price"}
"""Text flags holding numbers (lists), checked after parsing."""


def test_every_numeric_flag_has_a_range_that_its_help_shows_and_its_default_meets():
    missing, outside, undocumented = [], [], []
    for path, command in _commands():
        for param in command.params:
            numeric = getattr(param, "bare_type", lambda: None)() in (int, float)
            if not (numeric or param.name in LIST_FLAGS):
                continue
            if param.name not in RANGES:
                missing.append(f"{path} --{param.name}")
                continue
            if "[range: " not in (param.help or ""):
                undocumented.append(f"{path} --{param.name}")
            default = param.default
            if isinstance(default, (int, float)) and RANGES[param.name].problem(default):
                outside.append(f"{path} --{param.name} {default}")
    assert not missing and not outside and not undocumented, (missing, outside, undocumented)


def test_the_range_reads_in_the_help_page():
    result = runner.invoke(app, ["train", "plan", "--help"])
    assert "[range: 1 to 1,024]" in " ".join(result.output.split())  # --workers


@pytest.mark.parametrize("name", sorted(RANGES))
def test_every_range_refuses_nan_and_infinity(name):
    for bad in (math.nan, math.inf, -math.inf):
        assert "finite" in RANGES[name].problem(bad)


def test_models_list_reads_parameter_counts_as_people_say_them():
    from meshplan.cli.render import params, si

    assert [params(v) for v in (999, 999_885_952, 999_960_000, 1_235_814_400, 671e9)] == \
        ["999", "999.9 M", "1.0 B", "1.2 B", "671.0 B"]
    assert si(999_885_952) == "1 G"  # was "1e+03 M"
    row = next(line for line in runner.invoke(app, ["models", "list"]).stdout.splitlines()
               if "gemma-3-1b " in line)
    assert "999.9 M" in row and "e+" not in row
