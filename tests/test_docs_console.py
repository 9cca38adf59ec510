"""Every ```console example of the README and the documentation runs, and prints what the page
shows. How a block is run and compared (scratch directory, masked figures, `...` lines) is
tests/console_blocks.py; `python scripts/refresh_doc_examples.py` rewrites the blocks from real
runs. Blocks marked `<!-- console: slow -->` run in the slow tier."""

from __future__ import annotations

import pytest

from tests import console_blocks as cb

BLOCKS = [block for page in cb.pages() for block in cb.blocks(page)]


def _param(block: cb.Block):
    marks = [pytest.mark.slow] if cb.is_slow(block) else []
    return pytest.param(block, id=block.name, marks=marks)


def test_parse_commands_continuations_and_output():
    commands = cb.parse("$ meshplan a \\\n    --b 1\nout 1\n\nout 2\n$ meshplan c\n")
    assert [c.text for c in commands] == ["meshplan a \\\n    --b 1", "meshplan c"]
    assert commands[0].expected == ["out 1", "", "out 2"] and commands[1].expected == []


def test_matching_masks_only_the_listed_figures_and_honours_ellipsis():
    assert cb.matches(["evaluated 720 plans in 0.22 s  "], ["evaluated 720 plans in 13.5 s", ""])
    assert not cb.matches(["evaluated 720 plans in 0.22 s"], ["evaluated 721 plans in 0.22 s"])
    assert cb.matches(["appended x-8gpu-20260105 to f"], ["appended x-8gpu-20291231 to f"])
    assert cb.matches(["a", "...", "d"], ["a", "b", "c", "d"]) and cb.matches(["a", "...", "b"], ["a", "b"])
    assert not cb.matches(["a", "d"], ["a", "b", "d"])
    assert not cb.matches(["a", "...", "d"], ["a", "b", "c"])


def test_refresh_keeps_the_lines_a_page_selects():
    expected = ["head 1", "...", "│ TTFT (ms) │ 5.0 │", "...", "tail 3"]
    actual = ["head 2", "x", "│ TTFT (ms) │ 6.5 │", "│ TPOT (ms) │ 1.0 │", "tail 4"]
    assert cb.refreshed(expected, actual) == ["head 2", "...", "│ TTFT (ms) │ 6.5 │", "...", "tail 4"]
    assert cb.refreshed(["gone 1"] + ["..."], ["other"]) is None
    assert cb.refreshed(["old"], ["new  ", ""]) == ["new"]


def test_every_console_command_is_meshplan():
    others = [f"{b.name}: {c.text.split()[0]}" for b in BLOCKS for c in b.commands
              if not c.text.startswith("meshplan")]
    assert not others, f"console blocks run meshplan only; show these in ```bash blocks: {others}"


def test_there_are_examples_to_run():
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_console_block_prints_what_the_page_shows(block):
    missing = sorted({word for c in block.commands for word in c.text.split()
                      if word.startswith("src/meshplan/records/") and not (cb.REPO / word).exists()})
    if missing:
        pytest.skip(f"needs the built-in run records ({', '.join(missing)}), not in this checkout")
    failures = cb.check(block)
    assert not failures, f"{block.name}: the output differs from the page\n" + "\n\n".join(failures)
