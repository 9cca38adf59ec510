"""The README's benchmark figures are generated: every `<!-- BEGIN GENERATED: name -->` block must
equal what benchmarks/readme_blocks.py renders from the committed benchmarks/results/*.json, so
a quoted figure is always one a benchmark printed. Fast: renders, runs no benchmark."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest

from tests.conftest import REPO

BENCHMARKS = REPO / "benchmarks"


def _blocks_module():
    spec = importlib.util.spec_from_file_location("readme_blocks", BENCHMARKS / "readme_blocks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rb = _blocks_module()
README = (REPO / "README.md").read_text()


def test_every_block_is_in_the_readme_once_and_every_marker_is_known():
    names = [m.group(2) for m in rb.MARKER.finditer(README)]
    assert sorted(names) == sorted(rb.BLOCKS), "README markers and readme_blocks.BLOCKS differ"
    begins = re.findall(r"^<!-- BEGIN GENERATED:", README, re.M)
    assert len(begins) == len(names), "a BEGIN marker without its END"


def test_every_block_source_has_a_committed_result_and_a_script():
    for name, block in rb.BLOCKS.items():
        for source in block.sources:
            assert (BENCHMARKS / f"{source}.py").is_file(), f"{name}: no benchmarks/{source}.py"
            assert (rb.RESULTS / f"{source}.json").is_file(), (
                f"{name}: benchmarks/results/{source}.json is missing; run python benchmarks/{source}.py")


@pytest.mark.parametrize("name", sorted(rb.BLOCKS))
def test_readme_block_matches_committed_results(name):
    current = rb.blocks_in(README)[name]
    expected = rb.render(name)
    assert current == expected, (
        f"README block '{name}' differs from benchmarks/results: run {rb.BLOCKS[name].scripts()} "
        f"(or `python benchmarks/readme_blocks.py` if the results are already current)")


def test_rewrite_replaces_only_the_block_body(tmp_path):
    (tmp_path / "estimate_speed.json").write_text(json.dumps({
        "case": "a case", "runs": 3, "median_ms_without_memory": 1.234, "median_ms_with_memory": 2.5}))
    text = ("before\n<!-- BEGIN GENERATED: estimate_speed -->\nstale 9.99 ms\n"
            "<!-- END GENERATED: estimate_speed -->\nafter\n")
    new = rb.rewrite(text, tmp_path)
    assert new.startswith("before\n<!-- BEGIN GENERATED: estimate_speed -->\n")
    assert new.endswith("<!-- END GENERATED: estimate_speed -->\nafter\n")
    assert "1.23 ms (median of 3), 2.50 ms with the memory model" in new and "9.99" not in new
    assert rb.rewrite(new, tmp_path) == new


def test_a_block_without_results_is_left_alone(tmp_path):
    text = "<!-- BEGIN GENERATED: plan_sanity -->\nkept\n<!-- END GENERATED: plan_sanity -->\n"
    assert rb.rewrite(text, tmp_path) == text
