"""Writing files a user names (--out, --html, --trace, --csv, record files, site profiles): only
regular files, atomically. The text goes to a temporary file in the same folder, is flushed to
disk and renamed over the target, so a reader never sees half a file and a crash leaves the old
one. A directory, FIFO, device (/dev/null included) or socket is refused with one ConfigError,
never replaced: `calibrate --out /dev/something` used to swap a device node for a regular file.
A symlink is followed (its target is replaced); a new file gets the umask's permissions, an
existing one keeps its own."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from meshplan.errors import ConfigError

KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device",
         stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}


def check_writable(path: str | os.PathLike[str], what: str) -> Path:
    """The file to replace for `path` (a symlink resolved): refused when it exists and is not a
    regular file, or when its folder does not exist."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r}: cannot write there ({exc.strerror})") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ConfigError(f"{what} {str(path)!r} is {kind}; meshplan writes only regular files "
                          f"(give a file name, or leave the option out)")
    if not target.parent.is_dir():
        raise ConfigError(f"{what} {str(path)!r}: folder {str(target.parent)!r} does not exist")
    return target


@contextmanager
def open_atomic(path: str | os.PathLike[str], what: str, *, binary: bool = False,
                newline: str | None = None) -> Iterator[IO]:
    """A handle on a temporary file that replaces `path` when the block ends without error."""
    target = check_writable(path, what)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline=newline)) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes, what: str = "output file") -> None:
    """Write `data` (text as UTF-8) to `path` through open_atomic."""
    with open_atomic(path, what, binary=isinstance(data, bytes)) as out:
        out.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
