"""Small I/O helpers: atomic writes and hashing."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: str | Path, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data) -> str:
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


@contextmanager
def atomic_path(path: str | Path, before_replace=None):
    """Yield a temporary path beside ``path``; on success fsync and rename it into place.

    A killed or failing writer leaves only a ``.tmp-*`` file that nothing reads, never a
    file at ``path`` that looks complete. Errors such as a full disk (ENOSPC) propagate with
    the target named, and the previous file at ``path`` (if any) is untouched.
    ``before_replace`` (optional) is called after the data is on disk, just before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
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


def _unlink(p):
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def write_json(path: str | Path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=json_default) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o)}")
