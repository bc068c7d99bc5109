"""File output: every path a command will write is checked before any work
(:func:`check_output`), and written atomically (:func:`atomic_write`), so that a reader (or a
crashed run) never sees a half-written file."""

from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from commgraph.errors import OutputError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a full quota
FORCE_HELP = "replace output files that exist already"  # every command's --force


@contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; rename it onto ``path`` only if the
    block finishes without an exception, otherwise delete it. Same directory, so the rename is atomic.
    The file gets the mode the umask gives a new file (``0666 & ~umask``, as ``open`` would), and the
    temporary files an interrupted write left beside ``path`` (their writer is dead) are removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        written = Path(tmp).stat().st_size if Path(tmp).exists() else 0
        Path(tmp).unlink(missing_ok=True)
        if exc.errno in NO_SPACE:
            raise disk_full(target, written, more=True) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to ``path`` (created if missing): whole, or not at all. A full disk leaves
    the file as it was (a file this call created is removed) and raises :func:`disk_full`'s error."""
    target = Path(path)
    existed = target.exists()
    before = target.stat().st_size if existed else 0
    data = text.encode()
    try:
        with open(target, "ab") as handle:
            handle.write(data)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        if existed:
            os.truncate(target, before)
        else:
            target.unlink(missing_ok=True)
        raise disk_full(target, len(data)) from None


def disk_full(path: Path, needed: int, more: bool = False) -> OutputError:
    """The error of a write to ``path`` that the disk had no room for: the file, the bytes (``more``:
    more than ``needed``, all the disk took before it was full), the free space, and that nothing
    written before was lost (the writer left the file as it was)."""
    try:
        free = f"{shutil.disk_usage(path.parent).free:,} bytes free"
    except OSError:
        free = "no free space known"
    size = f"{'more than ' if more else ''}{needed:,} bytes to write"
    return OutputError(
        f"no space left on the disk of {path} ({size}, {free}); {path} was left as it was and nothing "
        "written before was lost: free some space or write elsewhere"
    )


def _remove_stale(target: Path) -> None:
    """Delete ``.<name>.<pid>.*.tmp`` beside ``target`` whose writer ``pid`` no longer runs."""
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        writer = stale.name[len(target.name) + 2 :].split(".", 1)[0]
        if not writer.isdigit() or not _running(int(writer)):
            stale.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _umask() -> int:
    """This process's umask, read without changing it where Linux shows it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_output(
    path: str | os.PathLike[str] | None, what: str, *, force: bool | None = None, folder: bool = False
) -> None:
    """Refuse, before any work, a ``path`` that could not be written when the work is done. The
    one check of every command that writes a file (or, with ``folder``, a folder); ``what`` names
    the option that gave it in the message. Nothing is created.

    - a file must not be an existing folder (a folder output not an existing file);
    - the nearest existing folder above it must be a folder (not a file) this process can write
      in: folders still missing are made when it is written;
    - an existing path is refused unless ``force`` is true (every command that writes has
      ``--force``); ``force=None`` skips that check, for a job's worker whose launcher made it.

    Raises:
        OutputError: saying what is wrong and what to pass instead.
    """
    if path is None:
        return
    target = Path(path)
    if not folder and target.is_dir():
        raise OutputError(f"{what} {target} is a folder: name a file, e.g. {target / 'out'}")
    if folder and target.exists() and not target.is_dir():
        raise OutputError(f"{what} {target} is a file: name a folder")
    if force is False and target.exists():
        raise OutputError(f"{what} {target} already exists; pass --force to replace it")
    above = target.absolute().parent
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        raise OutputError(f"{what} {target}: {above} is a file, not a folder; name a path in a folder")
    try:
        with tempfile.TemporaryFile(dir=above):
            pass
    except OSError as exc:
        raise OutputError(
            f"{what} {target}: cannot write in {above} ({exc.strerror or exc}); name a path in a writable folder"
        ) from None
