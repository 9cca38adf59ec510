"""The web app's display rules (meshplan/ui/static/format.js), run in Node: one number format per
unit (GiB, %, s or ms, thousands separators, no exponent), labels from field names, and a p10-p90
band found wherever it sits beside its value (issue #31: serving answers may add `low`/`high`
later, so the rule is generic). Skipped when `node` is not installed; the browser tests check the
same rules on real answers."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from meshplan.ui.pages import STATIC

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def js(expression: str):
    """The JSON value of `expression`, evaluated with format.js loaded as `F`."""
    script = ("globalThis.window = {};\n" + (STATIC / "format.js").read_text()
              + f"\nconst F = window.meshplanFormat;\nconsole.log(JSON.stringify({expression}));")
    done = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_one_format_per_column_and_no_exponent():
    rows = [{"peak_bytes": 8.398e10, "mfu": 0.4721, "step_time_s": 7.596, "tokens_per_s_per_gpu": 1079.4},
            {"peak_bytes": 84_197_410_816, "mfu": 0.4637, "step_time_s": 0.5, "tokens_per_s_per_gpu": 48364.2}]
    got = js("['peak_bytes', 'mfu', 'step_time_s', 'tokens_per_s_per_gpu'].map((k) => F.column(ROWS, k))"
             .replace("ROWS", json.dumps(rows)))
    assert [(c["header"], c["cells"]) for c in got] == [
        ("peak memory (GiB)", ["78.2", "78.4"]),
        ("MFU (%)", ["47.2", "46.4"]),
        ("step time (s)", ["7.60", "0.500"]),  # one unit for the column: s, since one value is over 1 s
        ("tokens/s per GPU", ["1,079", "48,364"]),
    ]
    fast = js("F.column([{step_time_s: 0.677}, {step_time_s: 0.0421}], 'step_time_s')")
    assert (fast["header"], fast["cells"]) == ("step time (ms)", ["677", "42.1"])


def test_key_value_text_carries_its_unit():
    cases = js("[F.valueText({gpu_memory_bytes: 85520809984}, 'gpu_memory_bytes', null),"
               " F.valueText({effective_training_time_ratio: 0.9939}, 'effective_training_time_ratio', null),"
               " F.valueText({ttft_ms: 241.37}, 'ttft_ms', null),"
               " F.valueText({p50: 13.81, p90: 19.5}, 'p50', 'ttft_ms'),"
               " F.valueText({usd_per_million_tokens: 1.234}, 'usd_per_million_tokens', null),"
               " F.valueText({n: 2, median_abs_rel_error: 0.0607}, 'n', 'step_time_s'),"
               " F.valueText({fits: false}, 'fits', null),"
               " F.valueText({attainment: 0.075, met: false}, 'attainment', 'slo')]")
    assert cases == ["79.6 GiB", "99.4%", "241 ms", "13.8 ms", "$1.23", "2", "no", "7.50%"]


def test_labels_come_from_the_field_names():
    assert js("['input_tokens_per_s', 'dp_comm_exposed', 'activation_bytes_per_layer', 'num_gpus', "
              "'mean_kv_utilization', 'checkpoint_interval_s'].map(F.label)") == [
        "input tokens/s", "DP comm exposed", "activation bytes per layer", "GPUs", "mean KV utilization",
        "checkpoint interval"]
    assert js("F.unitOf('activation_bytes_per_layer', null)") == "bytes"


@pytest.mark.parametrize("holder,key", [
    ({"tokens_per_s_per_gpu": 412.0, "intervals": {"tokens_per_s_per_gpu": {"low": 380.0, "high": 441.0}}},
     "tokens_per_s_per_gpu"),  # training answers (meshplan.bands)
    ({"tokens_per_s_per_gpu": 412.0, "tokens_per_s_per_gpu_low": 380.0, "tokens_per_s_per_gpu_high": 441.0},
     "tokens_per_s_per_gpu"),  # a flat row (train sweep's CSV columns)
    ({"metric": "tokens_per_s_per_gpu", "predicted": 412.0, "low": 380.0, "high": 441.0}, "predicted"),  # validate
    ({"mean": 412.0, "p50": 400.0, "low": 380.0, "high": 441.0}, "mean"),  # a serving metric's own object
])
def test_a_band_beside_a_value_shows_with_it_wherever_it_sits(holder, key):
    got = js(f"[F.bandOf({json.dumps(holder)}, {json.dumps(key)}), F.column([{json.dumps(holder)}], {json.dumps(key)}).cells[0]]")
    assert got[0] == {"low": 380.0, "high": 441.0} and got[1] == "412 (380-441)"


def test_band_parts_are_not_columns_of_their_own():
    row = {"ttft_ms_p90": 19.5, "ttft_ms_p90_low": 15.0, "ttft_ms_p90_high": 24.0, "low": 1.0, "layout": "tp1"}
    assert js(f"Object.keys({json.dumps(row)}).filter((k) => !F.HIDDEN.has(k) && !F.merged({json.dumps(row)}, k))") \
        == ["ttft_ms_p90", "layout"]
    assert js(f"[F.label('ttft_ms_p90'), F.valueText({json.dumps(row)}, 'ttft_ms_p90', null)]") == [
        "TTFT p90", "19.5 ms (15-24)"]


ANSWER = {"step_time_s": 0.314, "peak_bytes": 205_862_023_987.2, "hfu": 0.31, "mfu": 0.3034,
          "intervals": {"mfu": {"low": 0.195, "high": 0.401}},
          "metrics": {"ttft_ms": {"mean": 250.0, "p50": 241.37, "p90": 361.29, "p99": 1204.0}},
          "plans": [{"step_time_s": 0.677, "hardware": {"num_gpus": 8}}, {"step_time_s": 0.0421, "hardware": {"num_gpus": 16}}],
          "summary": {"n": 12, "median_abs_rel_error": 0.0607, "p90_abs_rel_error": 0.123,
                      "by_metric": {"step_time_s": {"n": 0, "median_abs_rel_error": None, "p90_abs_rel_error": None}}}}


def test_a_headline_value_reads_as_the_details_read_the_same_field():
    """pathText (the headline's numbers) writes a value as the details' key-value table or the
    table column holding it does: 192 GiB, not the report's 191.7 GiB; 241 ms; a row's value in
    its column's unit (ms, since every plan's step is under 1 s); an error summary as one line."""
    answer = json.dumps(ANSWER)
    got = js(f"['peak_bytes', 'mfu', 'metrics.ttft_ms.p50', 'metrics.ttft_ms.p90', 'plans.0.step_time_s', "
             f"'plans.1.hardware.num_gpus', 'summary', 'summary.by_metric.step_time_s', 'missing'].map((p) => F.pathText({answer}, p))")
    assert got == ["192 GiB", "30.3% (19.5-40.1)", "241 ms", "361 ms", "677 ms", "16",
                   "n=12, median |error| 6.07%, p90 |error| 12.3%", "no rows", None]
    details = js(f"[F.valueText({answer}, 'peak_bytes', null), F.valueText({answer}.metrics.ttft_ms, 'p50', 'ttft_ms'),"
                 f" F.column({answer}.plans, 'step_time_s').cells[0]]")
    assert details == ["192 GiB", "241 ms", "677"]


def test_a_fields_help_is_the_first_sentence_of_its_docstring():
    cases = ["GPUs per node (default: the GPU's usual server).",
             "Tokens per KV-cache block (page); None: engine default (vLLM 16, SGLang 1, TRT-LLM 32).",
             "Allow options no modeled engine ships (int4/int2 KV cache): a what-if of the cost model. Without "
             "it a plan is refused as the engine would refuse it.",
             "Random seed of the `serve simulate` workload.",
             "What is trained: full (every weight), lora (low-rank adapters on a frozen 16-bit base) or qlora "
             "(adapters on a frozen NF4 4-bit base with double quantization, bitsandbytes).", None]
    assert js(f"{json.dumps(cases)}.map(F.help)") == [
        "GPUs per node (default: the GPU's usual server)", "Tokens per KV-cache block (page)",
        "Allow options no modeled engine ships (int4/int2 KV cache): a what-if of the cost model",
        "Random seed of the serve simulate workload", "What is trained", ""]
