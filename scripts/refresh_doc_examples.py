"""Rewrite the ```console examples of the README and docs/ from real runs of their commands.

    python scripts/refresh_doc_examples.py                    # every page
    python scripts/refresh_doc_examples.py docs/training      # pages under a folder, or single pages
    python scripts/refresh_doc_examples.py --skip-slow        # leave the blocks marked slow alone

Each command of a block is run as tests/test_docs_console.py runs it (tests/console_blocks.py)
and its output replaces the lines the page shows. Where a page leaves lines out (`...`), the
lines it keeps are re-read from the new output; a kept line that is no longer printed is reported
and that block is left as it was. Run it after a change that moves a printed figure, read the
diff, and commit the pages with the change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import console_blocks as cb  # noqa: E402


def refresh_page(page: Path, skip_slow: bool) -> tuple[int, list[str]]:
    """Rewrite a page's console blocks; (blocks rewritten, problems)."""
    text, problems, changed = page.read_text(), [], 0
    for block in reversed(cb.blocks(page)):
        if skip_slow and cb.is_slow(block):
            continue
        scratch = cb.Scratch()
        try:
            shown = []
            for command in block.commands:
                lines = cb.refreshed(command.expected, scratch.run(command))
                if lines is None:
                    problems.append(f"{block.name}: `{command.text.splitlines()[0]}` no longer prints "
                                    "a line the page keeps; edit the block by hand from a real run")
                    break
                shown.append((command, lines))
            else:
                body = cb.render(shown)
                start, end = block.span
                if text[start:end] != body:
                    text, changed = text[:start] + body + text[end:], changed + 1
        finally:
            scratch.close()
    page.write_text(text)
    return changed, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="pages or folders (default: all)")
    parser.add_argument("--skip-slow", action="store_true", help="leave blocks marked slow alone")
    args = parser.parse_args()
    wanted = [p.resolve() for p in args.paths]
    problems = []
    for page in cb.pages():
        if wanted and not any(page == w or w in page.parents for w in wanted):
            continue
        changed, found = refresh_page(page, args.skip_slow)
        problems += found
        print(f"{page.relative_to(REPO)}: {changed} block(s) rewritten")
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
