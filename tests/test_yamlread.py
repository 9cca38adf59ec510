"""meshplan.yamlread: the C-parser reading of packaged data and of user files gives what PyYAML's
pure-Python safe loader gives, and absurd nesting in a user's file is one clear error (the C
composer would otherwise overflow the C stack and kill the process). The parse cache of packaged
documents gives back what was parsed, parses an edited or damaged entry again, never stores data
JSON would change, and can be off or unwritable without harm."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import meshplan
from meshplan.errors import ConfigError
from meshplan.userfiles import parse_yaml
from meshplan.yamlread import MAX_DEPTH, load_packaged, load_user, nests_deeper_than

PACKAGED = sorted(Path(meshplan.__file__).parent.rglob("*.yaml"))
RECORDS = sorted(Path(meshplan.__file__).parent.joinpath("records").rglob("*.yaml"))


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


# The parse cache: packaged documents are read from JSON after the first parse.

@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", str(folder))
    return folder


def test_a_packaged_document_is_parsed_once_then_read_from_the_cache(cache, monkeypatch):
    text = PACKAGED[0].read_text()
    expected = yaml.safe_load(text)
    assert load_packaged(text) == expected
    assert len(list(cache.glob("parsed-*.json"))) == 1
    monkeypatch.setattr(yaml, "load", lambda *a, **k: pytest.fail("parsed again"))
    assert load_packaged(text) == expected


def test_an_edited_document_is_parsed_afresh(cache):
    assert load_packaged("a: 1\n") == {"a": 1}
    assert load_packaged("a: 2\n") == {"a": 2}
    assert len(list(cache.glob("parsed-*.json"))) == 2


def test_a_damaged_cache_file_is_parsed_again_and_rewritten(cache):
    load_packaged("a: [1, 2.5, true, null]\n")
    (entry,) = cache.glob("parsed-*.json")
    entry.write_text('{"a": [1, 2')  # cut short, as by a full disk
    assert load_packaged("a: [1, 2.5, true, null]\n") == {"a": [1, 2.5, True, None]}
    assert entry.read_text() == '{"a": [1, 2.5, true, null]}'


@pytest.mark.parametrize("text", ["day: 2026-11-23\n", "1: one\n", "x: .nan\n"])
def test_data_json_would_change_is_returned_as_parsed_and_not_cached(cache, text):
    got, expected = load_packaged(text), yaml.safe_load(text)
    assert repr(got) == repr(expected)  # repr: nan is not equal to itself
    assert not list(cache.glob("parsed-*.json"))


def test_the_cache_can_be_turned_off_and_an_unwritable_one_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", "off")
    assert load_packaged("a: 1\n") == {"a": 1}
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MESHPLAN_CACHE_DIR", str(blocker / "cache"))
    assert load_packaged("a: 1\n") == {"a": 1}
    assert not any(tmp_path.rglob("parsed-*"))


def test_the_parsers_own_nesting_limit_reads_as_ours(monkeypatch):
    # PyYAML 6.0.4 refuses deep flow nesting itself (a ScannerError), before our own count.
    import meshplan.yamlread as yr

    def refuse(text):
        raise yaml.scanner.ScannerError("while increasing flow level", None,
                                        "exceeded maximum nesting depth", None)

    monkeypatch.setattr(yr, "load_user", refuse)
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_yaml("[[1]]", "deep.yaml")
