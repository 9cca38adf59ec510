"""The defaults-by-version table of docs/serving/simulation.md is the YAML's, rendered by
scripts/engine_defaults_table.py (never typed by hand)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("engine_defaults_table", ROOT / "scripts/engine_defaults_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_block_matches_the_yaml():
    script = _script()
    block = script.BLOCK.search(script.PAGE.read_text())
    assert block, "docs/serving/simulation.md lost its engine_defaults block"
    assert block.group(2) == script.render(), "run: python scripts/engine_defaults_table.py"


def test_every_release_range_of_a_shown_knob_is_a_row():
    table = _script().render()
    assert "| vllm | `max_num_batched_tokens` | < 0.9 |" in table
    assert "| sglang | `chunked_prefill_size` | 0.4 to <0.4.7 |" in table  # release numbers of the wheels
    assert "| sglang | `chunked_prefill_size` | 0.5.3 to <0.5.20 |" in table
    assert "| sglang | `schedule_policy` | 0.4 to <0.4.3.post3 | lpm |" in table
    assert "| tensorrt-llm | `block_size` | cpp: all | 64 |" in table
