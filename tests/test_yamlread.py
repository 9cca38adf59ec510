"""meshplan.yamlread: the C-parser reading of packaged data and of user files gives what PyYAML's
pure-Python safe loader gives, and absurd nesting in a user's file is one clear error (the C
composer would otherwise overflow the C stack and kill the process)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import meshplan
from meshplan.errors import ConfigError
from meshplan.userfiles import parse_yaml
from meshplan.yamlread import MAX_DEPTH, load_packaged, load_user, nests_deeper_than

PACKAGED = sorted(Path(meshplan.__file__).parent.rglob("*.yaml"))
RECORDS = sorted((Path(__file__).parents[2] / "shared" / "run-records").glob("*.yaml"))


def test_there_is_packaged_yaml():
    assert len(PACKAGED) >= 8


@pytest.mark.parametrize("path", PACKAGED, ids=lambda p: p.name)
def test_packaged_files_read_as_the_pure_python_loader_reads_them(path):
    text = path.read_text()
    assert load_packaged(text) == yaml.safe_load(text)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_record_files_read_as_the_pure_python_loader_reads_them(path):
    text = path.read_text()
    assert load_user(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ["[" * 200_000, "- " * 200_000 + "a", "{a: " * 100_000,
                                  "".join(" " * i + "k:\n" for i in range(MAX_DEPTH + 5))])
def test_absurd_nesting_is_one_error_not_a_crash(text):
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_yaml(text, "deep.yaml")


def test_nesting_at_the_limit_still_reads():
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert not nests_deeper_than(text, MAX_DEPTH)
    assert parse_yaml(text, "ok.yaml") == yaml.safe_load(text)


def test_a_syntax_error_names_the_line():
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML at line 3, column 2"):
        parse_yaml("a: 1\nb: [1, 2\nc: 3\n", "bad.yaml")
