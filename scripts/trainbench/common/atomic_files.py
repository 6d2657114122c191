"""Atomic file writes that need nothing beyond the standard library (the offline
install runs them before any dependency is installed); trainbench.common.records re-exports
them."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    """The process's umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write via a temp file in the same folder, fsync, then rename: a reader sees
    the old file or the whole new one, never a truncated one. The file gets the
    mode a plain ``open`` would give (0666 less the umask), not mkstemp's 0600, so a
    results folder shared by a group stays readable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(
                error.errno,
                f"no space left on the device for {path} (the previous file, if any, is "
                "untouched). Fix: free space, then run the same command again",
            ) from None
        raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
