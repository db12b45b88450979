"""Atomic file writes that keep the user's umask (re-exported by ``headgeom.io.files``)."""

from __future__ import annotations

import glob
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, before_replace=None):
    """Yield a temporary path beside ``path``; on success fsync and rename it into place.

    A killed or failing writer leaves only a ``.tmp-*`` file that nothing reads, never a
    file at ``path`` that looks complete. Errors such as a full disk (ENOSPC) propagate with
    the target named, and the previous file at ``path`` (if any) is untouched.
    ``before_replace`` (optional) is called after the data is on disk, just before the rename.
    The temporary files a killed earlier writer of ``path`` left are removed first (one writer of a
    file at a time: Snakemake locks a job's outputs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
        _unlink(stale)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            # mkstemp creates 0600 (and a writer may have replaced the file): publish it with
            # the mode open() would have given it under the user's umask
            os.fchmod(fh.fileno(), 0o666 & ~current_umask())
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except OSError as e:
        _unlink(tmp)
        if getattr(e, "headgeom_target", None) is not None:  # already names its file (nested writes)
            raise
        err = OSError(e.errno, f"could not write {path}: {e.strerror or e}")
        err.headgeom_target = str(path)
        raise err from e
    except BaseException:
        _unlink(tmp)
        raise


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc), so
    threads writing files meanwhile never see a temporary umask of 0."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _unlink(p):
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass
