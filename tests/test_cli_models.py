"""`meshplan models list` / `meshplan model show`: output, JSON fields and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_model_show_json_reports_exact_llama_31_8b():
    result = run("model", "show", "llama-3.1-8b", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["params_total"] == 8_030_261_248
    for key in ("name", "family", "params_total", "params_active", "params_embedding",
                "num_layers", "flops_per_token_forward", "kv_cache_bytes_per_token"):
        assert key in data
    assert data["seq_len"] == 4096
    assert data["kv_cache_bytes_per_token"] == 131_072


def test_model_show_seq_len_changes_attention_flops():
    short = json.loads(run("model", "show", "llama-3.1-8b", "--json", "--seq-len", "1024").stdout)
    long = json.loads(run("model", "show", "llama-3.1-8b", "--json", "--seq-len", "8192").stdout)
    assert long["flops_per_token_forward"] > short["flops_per_token_forward"]
    assert long["params_total"] == short["params_total"]


def test_model_show_reads_a_config_path(tmp_path, llama_8b_config):
    path = tmp_path / "my-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(llama_8b_config))
    result = run("model", "show", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params_total"] == 8_030_261_248


def test_model_show_table_renders():
    result = run("model", "show", "mixtral-8x7b")
    assert result.exit_code == 0, result.output
    assert "active per token" in result.stdout
    assert "46,702,792,704" in result.stdout


def test_models_list_names_the_catalog():
    result = run("models", "list", "--json")
    assert result.exit_code == 0, result.output
    names = {row["name"] for row in json.loads(result.stdout)}
    assert {"llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b"} <= names
    assert len(names) >= 30


@pytest.mark.parametrize("content, message", [
    ('{"model_type": "mamba", "hidden_size": 8}', "model_type 'mamba' is not supported"),
    ('{"model_type": "llama", "hidden_size": 4096', "not valid JSON"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}',
     "required field 'num_hidden_layers'"),
    ('{"model_type": "llama", "hidden_size": -64, "num_attention_heads": 4, "num_hidden_layers": 2}',
     "'hidden_size' = -64 is invalid"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 6, "num_hidden_layers": 2,'
     ' "intermediate_size": 128, "vocab_size": 10}', "not divisible by num_attention_heads=6"),
])
def test_bad_config_exits_2_with_one_clear_line(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    result = run("model", "show", str(path))
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_unknown_model_name_suggests_closest():
    result = run("model", "show", "llama-3.1-7b")
    assert result.exit_code == 2
    assert "closest:" in result.stderr and "llama-3.1-70b" in result.stderr


def test_python_dash_m_entry_point_exit_code():
    ok = subprocess.run([sys.executable, "-m", "meshplan", "model", "show", "gpt2", "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["params_total"] == 124_439_808
    bad = subprocess.run([sys.executable, "-m", "meshplan", "model", "show", "nope-model"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: unknown model 'nope-model'")
