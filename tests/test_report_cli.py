"""`--html FILE` on every predicting command: one self-contained file (plotly.js inlined, no
external script) whose figures carry the same numbers as the command's --json; a clear exit-2
message when the viz extra is missing."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner


from meshplan.cli.app import app
from meshplan.report import viz

runner = CliRunner()
GIB = 2**30
TRAIN = ("--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8", "--pp", "2",
         "--global-batch-size", "16", "--seq-len", "2048")
SERVE = ("--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-requests", "60",
         "--input-len", "256", "--output-len", "32")
FIGURE = re.compile(r'<script type="application/json" class="figure-data" data-target="[^"]+">(.*?)</script>', re.S)


def run(*args, code: int = 0):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def figures(path) -> list[dict]:
    """The figures a report embeds, after checking it is self-contained."""
    text = path.read_text(encoding="utf-8")
    inlined = "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js itself is in the file
    external = re.findall(r"<script[^>]*\bsrc=[^>]*>", text)  # nothing loaded from elsewhere
    assert inlined and external == []
    return [json.loads(block) for block in FIGURE.findall(text)]


def trace(figs: list[dict], name: str) -> dict:
    return next(t for f in figs for t in f["data"] if t.get("name") == name)


def test_train_memory_html_with_json(tmp_path):
    out = tmp_path / "memory.html"
    data = json.loads(run("train", "memory", *TRAIN, "--json", "--html", out).stdout)
    figs = figures(out)
    weights = trace(figs, "weights")["y"]
    assert weights == pytest.approx([s["weights_bytes"] / GIB for s in data["stages"]])
    assert figs[0]["layout"]["shapes"][0]["y0"] == pytest.approx(data["gpu_memory_bytes"] / GIB)
    peak = data["intervals"]["peak_bytes"]  # the JSON's band, on the peak stage's total
    marker = trace(figs, "peak, p10-p90")
    assert marker["x"] == [f"stage {max(data['stages'], key=lambda s: s['total_bytes'])['stage']}"]
    assert _bars(marker) == ([pytest.approx(peak["low"] / GIB)], [pytest.approx(peak["high"] / GIB)])


def test_train_estimate_html_has_breakdown_gantt_and_memory(tmp_path):
    out = tmp_path / "estimate.html"
    data = json.loads(run("train", "estimate", *TRAIN, "--json", "--html", out).stdout)
    breakdown, gantt, memory, waterfall = figures(out)
    hours = [v / 3600 for v in data["goodput_detail"]["waterfall_s"].values()]  # per day of training
    assert waterfall["data"][0]["y"][:-1] == pytest.approx(hours)
    shown = {k.replace("_", " "): v for k, v in data["breakdown"].items() if v > 0}
    assert breakdown["data"][0]["y"] == list(shown) and breakdown["data"][0]["x"] == pytest.approx(list(shown.values()))
    assert {t["name"] for t in gantt["data"]} >= {"F", "B"}
    assert trace([memory], "activations")["y"] == pytest.approx(
        [s["activations_bytes"] / GIB for s in data["memory"]["stages"]])
    band = data["intervals"]["tokens_per_s_per_gpu"]  # the JSON's band is the report's headline row
    assert f"{band['low']:,.0f} - {band['high']:,.0f}" in out.read_text()
    peak, step = data["intervals"]["peak_bytes"], data["intervals"]["step_time_s"]
    marker = trace([memory], "peak, p10-p90")  # the peak stage's total, with its band
    assert marker["y"] == [pytest.approx(data["memory"]["peak_bytes"] / GIB)]
    assert _bars(marker) == ([pytest.approx(peak["low"] / GIB)], [pytest.approx(peak["high"] / GIB)])
    whole = trace([breakdown], "whole step, p10-p90")
    assert _bars(whole, "x") == ([pytest.approx(step["low"])], [pytest.approx(step["high"])])


def test_train_plan_html_scatter_is_the_ranked_plans(tmp_path):
    out = tmp_path / "plan.html"
    data = json.loads(run("train", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb",
                          "--num-gpus", "8", "--global-batch-size", "32", "--seq-len", "2048",
                          "--top", "3", "--json", "--html", out).stdout)
    text = out.read_text()
    assert "Why the winner wins" in text and "runner-up" in text
    dots = trace(figures(out), "plans")
    assert sorted(dots["y"]) == pytest.approx(sorted(p["tokens_per_s_per_gpu"] * 8 for p in data["plans"]))


def _bars(t: dict, axis: str = "y") -> tuple[list, list]:
    """(low, high) a trace's error bars reach, from its values and asymmetric error arrays."""
    err, values = t[f"error_{axis}"], t[axis]
    assert err["type"] == "data" and err["symmetric"] is False
    pairs = [(v, m, a) for v, m, a in zip(values, err["arrayminus"], err["array"])]
    return ([None if m is None else v - m for v, m, _ in pairs], [None if a is None else v + a for v, _, a in pairs])


@pytest.mark.parametrize(("model", "gpu", "extrapolates"),
                         [("llama-3.2-1b", "a100-sxm-80gb", False), ("gpt2", "mi300x-192gb", True)])
def test_train_plan_html_draws_each_plans_json_band_as_error_bars(tmp_path, model, gpu, extrapolates):
    """Every ranked point's error bar spans its `intervals.tokens_per_s_per_gpu` of --json (times
    the GPUs), the table lists each band, and the extrapolating plans are crossed out by name."""
    out = tmp_path / "plan.html"
    data = json.loads(run("train", "plan", "--model", model, "--gpu", gpu, "--num-gpus", "8",
                          "--global-batch-size", "32", "--seq-len", "1024", "--top", "4", "--json",
                          "--html", out).stdout)
    figs, text = figures(out), out.read_text()
    dots = trace(figs, "plans")
    bands = [p["intervals"]["tokens_per_s_per_gpu"] for p in data["plans"]]  # best score first, as drawn
    assert dots["y"] == pytest.approx([p["tokens_per_s_per_gpu"] * 8 for p in data["plans"]])
    low, high = _bars(dots)
    assert low == pytest.approx([b["low"] * 8 for b in bands]) and high == pytest.approx([b["high"] * 8 for b in bands])
    assert _bars(trace(figs, "winner")) == (pytest.approx([low[0]]), pytest.approx([high[0]]))
    for band in bands:
        assert f"{band['low']:,.0f} - {band['high']:,.0f}" in text
    steps = [p["intervals"]["step_time_s"] for p in data["plans"][:2]]
    whole = [_bars(trace(figs, name)) for name in [t["name"] for f in figs for t in f["data"]
                                                   if t["name"].startswith(("winner (", "runner-up ("))]]
    assert [(lo[-1], hi[-1]) for lo, hi in whole] == [pytest.approx((s["low"], s["high"])) for s in steps]
    crossed = [t for f in figs for t in f["data"] if t["name"].startswith("extrapolating")]
    flagged = [p for p in data["plans"] if p["extrapolating"]]
    assert bool(flagged) == extrapolates and len(crossed) == int(extrapolates)
    if extrapolates:
        assert crossed[0]["y"] == pytest.approx([p["tokens_per_s_per_gpu"] * 8 for p in flagged])
        assert flagged[0]["extrapolating"][0] in crossed[0]["hovertext"][0]
        assert flagged[0]["extrapolating"][0] in text


def test_train_sweep_html(tmp_path):
    out = tmp_path / "sweep.html"
    run("train", "sweep", "--models", "llama-3.2-1b", "--gpus", "h100-sxm-80gb", "--num-gpus", "8-16",
        "--global-batch-tokens", "65536", "--workers", "1", "--out", tmp_path / "s.csv", "--html", out)
    (line,) = figures(out)[0]["data"]
    assert line["x"] == [8, 16] and all(y > 0 for y in line["y"])
    import csv

    with open(tmp_path / "s.csv", newline="") as f:
        cells = sorted(csv.DictReader(f), key=lambda r: int(r["num_gpus"]))
    low, high = _bars(line)  # the CSV's tokens_per_s_low/high
    assert low == pytest.approx([float(r["tokens_per_s_low"]) for r in cells])
    assert high == pytest.approx([float(r["tokens_per_s_high"]) for r in cells])


def test_serve_simulate_html(tmp_path):
    out = tmp_path / "simulate.html"
    data = json.loads(run("serve", "simulate", *SERVE, "--request-rate", "20", "--slo-ttft-ms", "500",
                          "--json", "--html", out).stdout)
    cdfs, activity, slo = figures(out)
    ttft = cdfs["data"][0]["x"]
    assert len(ttft) == data["metrics"]["completed"]
    assert sorted(ttft) == ttft and ttft[0] > 0
    assert [t["name"] for t in activity["data"]] == ["output tokens/s", "running", "waiting", "KV used"]
    assert slo["data"][0]["y"][-1] == pytest.approx(
        data["metrics"]["goodput_requests_per_s"] / data["metrics"]["requests_per_s"])


def test_serve_sweep_html_with_slo_lines(tmp_path):
    out = tmp_path / "sweep.html"
    run("serve", "sweep", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--rates", "2,8",
        "--num-requests", "60", "--slo-ttft-ms", "300", "--html", out, "--csv", tmp_path / "c.csv")
    (curve,) = figures(out)
    rows = list(__import__("csv").DictReader((tmp_path / "c.csv").open()))
    p90 = trace([curve], "TTFT p90")
    assert p90["y"] == pytest.approx([float(r["ttft_ms_p90"]) for r in rows])
    assert [s["y0"] for s in curve["layout"]["shapes"]] == [300]


def test_serve_plan_html(tmp_path):
    out = tmp_path / "plan.html"
    data = json.loads(run("serve", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb",
                          "--request-rate", "5", "--slo-ttft-ms", "500", "--max-gpus", "1",
                          "--num-requests", "60", "--no-disaggregation", "--no-quantization",
                          "--workers", "1", "--top", "2", "--json", "--html", out).stdout)
    capacity = figures(out)[0]["data"][0]  # horizontal bars: the capacities run along x
    assert capacity["orientation"] == "h"
    assert capacity["x"] == pytest.approx([p["capacity_requests_per_s"] for p in data["plans"]])


def test_validate_html(tmp_path):
    record = {"id": "t1", "kind": "training", "source": {"name": "test", "key": "k"},
              "model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
              "training": {"framework": "megatron", "seq_length": 2048, "global_batch_size": 16,
                           "micro_batch_size": 1, "tp": 1, "pp": 1},
              "measured": {"tokens_per_s_per_gpu": 30000.0, "step_time_s": 0.15}}
    path = tmp_path / "records.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "records": [record]}))
    out = tmp_path / "validate.html"
    data = json.loads(run("validate", path, "--workers", "1", "--json", "--html", out).stdout)
    scatter, groups = figures(out)
    step = trace([scatter], "step_time_s")
    row = next(r for r in data["records"] if r["metric"] == "step_time_s")
    assert (step["x"], step["y"]) == ([row["measured"]], [pytest.approx(row["predicted"])])
    assert groups["data"][0]["name"] == "k / h100-sxm-80gb"


def test_missing_viz_extra_is_one_message_and_exit_2(tmp_path, monkeypatch):
    real = viz.importlib.import_module

    def no_plotly(name, *args):
        if name.split(".")[0] in ("plotly", "jinja2"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(viz.importlib, "import_module", no_plotly)
    out = tmp_path / "r.html"
    result = run("train", "memory", *TRAIN, "--html", out, code=2)
    assert "--html needs the viz extra: pip install 'meshplan[viz]'" in result.stderr
    assert "Traceback" not in result.output and not out.exists()
    assert result.stdout == ""  # stopped before computing anything


def test_html_to_a_directory_is_a_clear_error(tmp_path):
    result = run("train", "memory", *TRAIN, "--html", tmp_path, code=2)
    assert f"--html {str(tmp_path)!r} is a directory; meshplan writes only regular files" in " ".join(result.stderr.split())


def test_one_bubble_in_the_table_the_json_and_the_report(tmp_path):
    """The headline of the HTML report printed the mean idle share over stages of the pipelined
    part (4.6%) while the breakdown printed the busiest stage's idle share of the step (1.0%) (#34
    item 5). One definition now (StepEstimate.bubble_fraction): the table's `pipeline bubble`
    share, the JSON's bubble_fraction and breakdown, and the report's headline agree."""
    args = ("--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64", "--tp", "8",
            "--pp", "4", "--vpp", "2", "--global-batch-size", "16", "--micro-batch-size", "1",
            "--seq-len", "8192")
    out = tmp_path / "estimate.html"
    data = json.loads(run("train", "estimate", *args, "--json", "--html", out).stdout)
    share = data["breakdown"]["pipeline_bubble"] / data["step_time_s"]
    assert data["bubble_fraction"] == pytest.approx(share, rel=1e-12) and share > 0.01
    table = run("train", "estimate", *args).stdout
    row = re.search(r"pipeline bubble\s+[\d.]+ s\s+([\d.]+)%", table)
    assert row and row.group(1) == f"{100 * share:.1f}", table
    page = out.read_text(encoding="utf-8")
    assert f"{share:.1%}" in re.search(r"pipeline bubble[^%]*%", page).group(0)
