"""Small I/O helpers: atomic writes and hashing."""

from __future__ import annotations

import glob
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


def within_workdir(path: str | Path, workdir: str | Path | None = None) -> str:
    """``path`` relative to the work directory (default: the current one) when it lies inside it,
    else absolute: what a job's inputs and provenance record, so that a run directory copied
    elsewhere (with the workflow in it) names the same files and has nothing to rerun."""
    p = Path(path).absolute()
    base = Path(workdir if workdir is not None else Path.cwd()).absolute()
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


def sha256_bytes(data) -> str:
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


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


def write_set(outputs: dict[str, str], contents: dict[str, str], prov: dict, prov_key: str = "prov",
              writers: dict | None = None) -> None:
    """Write a set of files (a table's CSV/Markdown/LaTeX, a figure's PNG/PDF) and its provenance
    sidecar so that the set is complete or visibly incomplete after a kill at any point: the old
    sidecar is withdrawn first, each file is written atomically, and the sidecar, written last,
    records every file's sha256 under ``outputs``. A reader (``set_problems``) treats a missing
    sidecar, or one whose sha256s do not match the files beside it, as an incomplete set.

    ``contents`` maps a key of ``outputs`` to text; ``writers`` maps a key to a function that
    writes the file at the path it is given (binary formats)."""
    prov_path = Path(outputs[prov_key])
    prov_path.unlink(missing_ok=True)
    recorded = {}
    for key, path in outputs.items():
        if key == prov_key:
            continue
        if key in contents:
            write_text(path, contents[key])
        elif writers and key in writers:
            with atomic_path(path) as tmp:
                writers[key](tmp)
        else:
            continue
        recorded[key] = {"name": Path(path).name, "sha256": sha256_file(path)}
    write_json(prov_path, {**prov, "outputs": recorded})


def set_problems(prov_path: str | Path, prov: dict | None = None) -> list[str]:
    """Why the files a sidecar describes are not the set it was written with ([] = complete).
    Sidecars written before ``outputs`` was recorded are taken as they are."""
    prov_path = Path(prov_path)
    if prov is None:
        if not prov_path.exists():
            return [f"{prov_path.name} is missing"]
        try:
            prov = json.loads(prov_path.read_text())
        except (OSError, ValueError) as e:
            return [f"{prov_path.name} is unreadable ({e})"]
    outs = prov.get("outputs") if isinstance(prov, dict) else None
    if outs is None:
        return []
    if not isinstance(outs, dict):
        return [f"{prov_path.name}: 'outputs' is not an object"]
    problems = []
    for key, rec in outs.items():
        name = rec.get("name") if isinstance(rec, dict) else None
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            problems.append(f"{key}: bad file name {name!r}")
            continue
        f = prov_path.parent / name
        if not f.exists():
            problems.append(f"{name} is missing")
        elif sha256_file(f) != rec.get("sha256"):
            problems.append(f"{name} does not match the sha256 its sidecar records")
    return problems


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
