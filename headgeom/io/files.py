"""Small I/O helpers: atomic writes and hashing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# where the layers below headgeom.io write files too (headgeom.adapters.oracle's cache)
from headgeom.core.atomic import _unlink, atomic_path, current_umask  # noqa: F401


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
