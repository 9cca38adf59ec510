"""The ```console examples of the README and the documentation pages: parse, run, compare.

A console block is commands and what they print, as a terminal shows them:

    $ meshplan train memory --model llama-3.1-70b ... \\
        --recompute selective            (a line ending in a backslash continues the command)
    ...what the command printed (stdout and stderr, in order)...
    $ meshplan next-command

Every command of a console block must start with `meshplan` (other commands, and commands that
are not meant to run, go in ```bash blocks). The commands of one block run in order with bash, in
a scratch directory of their own that looks like a checkout (`src/` and `tests/` link to the
repository's, and the input files of FIXTURES are copied in), with the repository's `src` on
PYTHONPATH, COLUMNS=COLUMNS, and a fresh config directory that the output names as the default
one, `~/.config/meshplan` (other paths in the scratch directory are shown relative to it, as from
the current directory). Their output is compared with the block after `normalise`:

- trailing whitespace of each line and trailing blank lines are dropped;
- the volatile figures of MASKS (wall-clock seconds, today's date in a generated record id) are
  replaced by placeholders on both sides;
- a line that is just `...` stands for any number of lines the page leaves out.

Everything else must match exactly. `scripts/refresh_doc_examples.py` rewrites the blocks from
real runs.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLUMNS = 150
"""The terminal width the examples are rendered at."""
ELLIPSIS = "..."
FENCE = re.compile(r"^```console\n(.*?)^```\n", re.S | re.M)
MASKS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"\bin \d+(?:\.\d+)? s\b"), "in <seconds> s"),    # "evaluated 720 plans ... in 0.22 s"
    (re.compile(r"(gpu-)\d{8}\b"), r"\g<1><date>"),                # ids `record` makes from today's date
]
"""Volatile figures, masked on both sides before comparing: what each replaces, and with what."""
FIXTURES = {
    "result.json": "tests/data/bench/vllm.json",
    "conversations.jsonl": "tests/data/traces/mooncake_sample.jsonl",
    "broken/config.json": "tests/data/docs_console/broken/config.json",
    "my-model/config.json": "tests/data/docs_console/my-model/config.json",
    "plan.yaml": "tests/data/docs_console/plan.yaml",
    "bomb.yaml": "tests/data/docs_console/bomb.yaml",
}
"""Input files the examples name: where in the scratch directory -> the repository file copied there."""
CONFIG_DIR = ".config/meshplan"
"""The config directory (site profiles) in the scratch directory, shown as the default ~/.config/meshplan."""


@dataclass(frozen=True, slots=True)
class Command:
    """One `$ ` command of a block and the output the page shows for it."""

    text: str
    expected: list[str]


@dataclass(frozen=True, slots=True)
class Block:
    """A console block: its page, the line of its opening fence, its span in the text, its commands."""

    page: Path
    line: int
    span: tuple[int, int]
    commands: list[Command]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages(root: Path = REPO) -> list[Path]:
    """README.md and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def parse(body: str) -> list[Command]:
    """The commands of a block's body, each with the lines it shows as output."""
    commands: list[Command] = []
    lines = body.splitlines()
    i = 0
    if lines and not lines[0].startswith("$ "):
        raise ValueError(f"a console block starts with a `$ ` command, not {lines[0]!r}")
    while i < len(lines):
        text = [lines[i][2:]]
        while text[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            text.append(lines[i])
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        commands.append(Command("\n".join(text), expected))
    return commands


def blocks(page: Path) -> list[Block]:
    """Every console block of a page."""
    text = page.read_text()
    return [Block(page, text[:m.start()].count("\n") + 1, (m.start(1), m.end(1)), parse(m.group(1)))
            for m in FENCE.finditer(text)]


def normalise(lines: list[str]) -> list[str]:
    """Trailing whitespace and trailing blank lines dropped, volatile figures masked."""
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    for pattern, replacement in MASKS:
        out = [pattern.sub(replacement, line) for line in out]
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the output matches the page's lines, each `...` line standing for any lines."""
    parts = [r"(?:[^\n]*\n)*?" if line == ELLIPSIS else re.escape(line) + r"\n" for line in normalise(expected)]
    return re.fullmatch("".join(parts), "".join(line + "\n" for line in normalise(actual))) is not None


def diff(expected: list[str], actual: list[str], name: str) -> str:
    """A unified diff of the page's lines against the output, both normalised."""
    return "\n".join(difflib.unified_diff(normalise(expected), normalise(actual), f"{name} (page)",
                                          f"{name} (output)", lineterm=""))


class Scratch:
    """A directory like a checkout, a `meshplan` on PATH that runs this repository's code."""

    def __init__(self, root: Path = REPO):
        self.root = root
        self.dir = Path(tempfile.mkdtemp(prefix="meshplan-console-"))
        for name in ("src", "tests"):
            (self.dir / name).symlink_to(root / name)
        for target, source in FIXTURES.items():
            (self.dir / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / source, self.dir / target)
        bin_dir = self.dir / ".bin"
        bin_dir.mkdir()
        shim = bin_dir / "meshplan"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m meshplan "$@"\n')
        shim.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONPATH": str(root / "src"), "COLUMNS": str(COLUMNS), "LINES": "50",
                    "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "TERM": "dumb",
                    "MESHPLAN_CONFIG_DIR": str(self.dir / CONFIG_DIR)}
        self.env.pop("MESHPLAN_SITE", None)
        self.env.pop("FORCE_COLOR", None)

    def run(self, command: Command, timeout: float = 600) -> list[str]:
        """What the command prints, stdout and stderr interleaved as a terminal shows them."""
        if not command.text.startswith("meshplan"):
            raise ValueError(f"a console example runs meshplan, not {command.text.split()[0]!r}; "
                             "show other commands in a ```bash block")
        done = subprocess.run(["bash", "-c", command.text], cwd=self.dir, env=self.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        shown = done.stdout.replace(f"{self.dir}/{CONFIG_DIR}", f"~/{CONFIG_DIR}")
        return shown.replace(f"{self.dir}/", "").splitlines()

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def check(block: Block) -> list[str]:
    """Run a block's commands; a diff for each command whose output differs from the page."""
    scratch = Scratch()
    try:
        failures = []
        for command in block.commands:
            actual = scratch.run(command)
            if not matches(command.expected, actual):
                failures.append(f"$ {command.text}\n" + diff(command.expected, actual, block.name))
        return failures
    finally:
        scratch.close()


SLOW = "<!-- console: slow -->"
"""Put on the line before a block's fence: the block runs only in the slow tier."""


def is_slow(block: Block) -> bool:
    before = block.page.read_text()[:block.span[0]].rstrip("\n").split("\n")
    return len(before) >= 2 and before[-2].strip() == SLOW


def _key(line: str) -> str:
    """A line up to its first digit: what identifies it when its figures change."""
    return re.split(r"\d", line, maxsplit=1)[0].rstrip()


def refreshed(expected: list[str], actual: list[str]) -> list[str] | None:
    """The page's lines re-read from a real output: all of it, or where the page leaves lines out
    (`...`), each kept line replaced by the next output line that starts the same way up to its
    first digit. None when a kept line is no longer in the output, or lines would be left out
    where the page has no `...`."""
    actual = [line.rstrip() for line in actual]
    while actual and not actual[-1]:
        actual.pop()
    if ELLIPSIS not in expected:
        return actual
    out, at = [], 0
    for line in expected:
        if line == ELLIPSIS:
            out.append(line)
            continue
        key = _key(line)
        found = next((i for i in range(at, len(actual)) if _key(actual[i]) == key), None)
        if found is None:
            return None
        out.append(actual[found])
        at = found + 1
    return out if matches(out, actual) else None  # lines left out without a `...` line


def render(commands: list[tuple[Command, list[str]]]) -> str:
    """A block's body from its commands and the output lines to show."""
    return "".join(f"$ {c.text}\n" + "".join(line + "\n" for line in lines) for c, lines in commands)
