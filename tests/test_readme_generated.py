"""The benchmark figures of the README and the documentation pages are generated: every
`<!-- BEGIN GENERATED: name -->` block, in whichever of README.md and docs/**/*.md holds it, must
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
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # readme_blocks imports readme_cells and readme_serving by name
    spec = importlib.util.spec_from_file_location("readme_blocks", BENCHMARKS / "readme_blocks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rb = _blocks_module()
PAGES = {page: page.read_text() for page in rb.pages(REPO)}


def test_pages_are_the_readme_and_the_docs():
    names = {str(p.relative_to(REPO)) for p in PAGES}
    assert "README.md" in names and "docs/training/memory.md" in names and "docs/api.md" in names


def test_every_block_is_in_one_page_once_and_every_marker_is_known():
    names = [m.group(2) for text in PAGES.values() for m in rb.MARKER.finditer(text)]
    assert sorted(names) == sorted(rb.BLOCKS), "page markers and readme_blocks.BLOCKS differ"
    for page, text in PAGES.items():
        begins = re.findall(r"^<!-- BEGIN GENERATED:", text, re.M)
        assert len(begins) == len(rb.blocks_in(text)), f"{page.name}: a BEGIN marker without its END"
    assert sorted(rb.locate(REPO)) == sorted(rb.BLOCKS)


def test_the_readme_holds_the_validated_against_table():
    assert rb.locate(REPO)["validated_against"] == REPO / "README.md"


def test_every_block_source_has_a_committed_result_and_a_script():
    for name, block in rb.BLOCKS.items():
        for source in block.sources:
            assert (BENCHMARKS / f"{source}.py").is_file(), f"{name}: no benchmarks/{source}.py"
            assert (rb.RESULTS / f"{source}.json").is_file(), (
                f"{name}: benchmarks/results/{source}.json is missing; run python benchmarks/{source}.py")


@pytest.mark.parametrize("name", sorted(rb.BLOCKS))
def test_block_matches_committed_results(name):
    page = rb.locate(REPO)[name]
    current = rb.blocks_in(PAGES[page])[name]
    expected = rb.render(name)
    assert current == expected, (
        f"block '{name}' in {page.relative_to(REPO)} differs from benchmarks/results: run "
        f"{rb.BLOCKS[name].scripts()} (or `python benchmarks/readme_blocks.py` if the results are "
        f"already current)")


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


def test_a_block_in_two_pages_is_refused(tmp_path):
    (tmp_path / "docs").mkdir()
    block = "<!-- BEGIN GENERATED: plan_sanity -->\nx\n<!-- END GENERATED: plan_sanity -->\n"
    (tmp_path / "README.md").write_text(block)
    (tmp_path / "docs" / "page.md").write_text(block)
    with pytest.raises(ValueError, match="plan_sanity"):
        rb.locate(tmp_path)


def test_rewrite_pages_finds_each_block_where_it_is(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "README.md").write_text("no blocks\n")
    page = tmp_path / "docs" / "sub" / "speed.md"
    page.write_text("<!-- BEGIN GENERATED: estimate_speed -->\nstale\n<!-- END GENERATED: estimate_speed -->\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "estimate_speed.json").write_text(json.dumps({
        "case": "a case", "runs": 3, "median_ms_without_memory": 1.0, "median_ms_with_memory": 2.0}))
    assert rb.rewrite_pages(results, tmp_path) == [page]
    assert "1.00 ms (median of 3)" in page.read_text()
    assert rb.rewrite_pages(results, tmp_path) == []


def test_save_writes_the_result_and_rerenders_the_page_that_quotes_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("no blocks\n")
    page = tmp_path / "docs" / "speed.md"
    page.write_text("<!-- BEGIN GENERATED: estimate_speed -->\nstale\n<!-- END GENERATED: estimate_speed -->\n")
    monkeypatch.setattr(rb, "RESULTS", tmp_path / "results")
    rb.save("estimate_speed", {"case": "a case", "runs": 3, "median_ms_without_memory": 1.0,
                               "median_ms_with_memory": 2.0}, root=tmp_path)
    assert (tmp_path / "results" / "estimate_speed.json").is_file()
    assert "1.00 ms (median of 3)" in page.read_text()
    assert "docs/speed.md" in capsys.readouterr().out
