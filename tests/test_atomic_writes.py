"""Outputs go to regular files only, atomically (#34): a directory, FIFO or device node named as
--out, --html, --trace or a site profile is refused with one message and left as it was (a device
node used to be replaced by a regular file); a regular file is replaced whole or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.outfiles import open_atomic, write_atomic

runner = CliRunner()
ESTIMATE = ("train", "estimate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8")
RECORD = ("record", "training", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
          "--framework", "megatron", "--seq-len", "8192", "--global-batch-size", "128", "--tp", "1",
          "--pp", "1", "--recompute", "none", "--precision", "bf16", "--step-time-s", "5", "--id", "r1")
RECORDS = Path(__file__).parents[1] / "src/meshplan/records/training-calibration.yaml"


def device(tmp_path: Path) -> Path:
    """A character device node like /dev/null, made in tmp_path (root only; else skipped)."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def folder(tmp_path: Path) -> Path:
    path = tmp_path / "folder"
    path.mkdir()
    return path


KINDS = {"device": (device, "a device"), "fifo": (fifo, "a FIFO"), "directory": (folder, "a directory")}


@pytest.mark.parametrize("kind", KINDS)
def test_the_helper_refuses_what_is_not_a_regular_file(tmp_path, kind):
    make, words = KINDS[kind]
    path = make(tmp_path)
    before = os.stat(path).st_mode
    with pytest.raises(ConfigError, match=f"--out '{path}' is {words}; meshplan writes only regular files"):
        write_atomic(path, "x", "--out")
    assert os.stat(path).st_mode == before and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    with pytest.raises(RuntimeError):
        with open_atomic(path, "--out") as out:
            out.write("half")
            raise RuntimeError("disk gone")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.yaml"]
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symlink_is_followed_and_kept(tmp_path):
    target, link = tmp_path / "real.html", tmp_path / "link.html"
    target.write_text("old")
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag", ["--html", "--trace"])
def test_cli_outputs_refuse_devices_fifos_and_folders(tmp_path, kind, flag):
    make, words = KINDS[kind]
    path = make(tmp_path)
    result = runner.invoke(app, [*ESTIMATE, flag, str(path)])
    assert result.exit_code == 2, result.output
    assert f"{flag} {str(path)!r} is {words}" in " ".join(result.stderr.split())
    assert stat.S_IFMT(os.stat(path).st_mode) == stat.S_IFMT(os.lstat(path).st_mode)


def test_record_out_onto_a_device_is_refused_and_the_node_stays(tmp_path):
    node = device(tmp_path)
    result = runner.invoke(app, [*RECORD, "--out", str(node)])
    assert result.exit_code == 2 and "is not a regular file" in result.stderr  # read first, refused there
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_calibrate_out_onto_a_device_is_refused_before_the_fit(tmp_path):
    node = device(tmp_path)
    result = runner.invoke(app, ["calibrate", "--out", str(node), str(RECORDS)])
    assert result.exit_code == 2 and f"--out {str(node)!r} is a device" in " ".join(result.stderr.split())
    assert stat.S_ISCHR(os.stat(node).st_mode)
