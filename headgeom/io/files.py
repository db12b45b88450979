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
    write_recorded_json(prov_path, {**prov, "outputs": recorded}, output_identity(prov_path, prov))


SIDECAR = ".prov.json"


def output_identity(prov_path: str | Path, prov: dict) -> dict:
    """What a table or figure is (its sidecar's ``identity``): the output (its sidecar's name), the
    checkpoints of the shards it was built from (model -> tensor-store sha256, from their
    provenance) and the digest of its params."""
    checkpoints = {}
    for rec in prov.get("inputs") or []:
        p = rec.get("provenance") if isinstance(rec, dict) else None
        src = p.get("model_source") if isinstance(p, dict) else None
        if isinstance(src, dict) and src.get("store_sha256"):
            checkpoints[str(p.get("model"))] = src["store_sha256"]
    return {"output": Path(prov_path).name.removesuffix(SIDECAR), "checkpoints": dict(sorted(checkpoints.items())),
            "config": hashlib.sha256(json.dumps(prov.get("params"), sort_keys=True, default=str).encode()).hexdigest()}


RECORD = "record"  # a JSON file's own content record: the sha256 of everything else in it


def _canonical(obj) -> bytes:
    """``obj`` as the JSON a reader parses back, in one spelling (sorted keys, no spaces)."""
    return json.dumps(json.loads(json.dumps(obj, default=json_default)), sort_keys=True, separators=(",", ":")).encode()


def write_recorded_json(path: str | Path, obj: dict, identity: dict) -> None:
    """Write ``obj`` as JSON with what it is (``identity``) and its content record (``record``:
    the sha256 of the rest), atomically. ``recorded_json`` reads it back checked."""
    body = {**obj, "identity": identity}
    write_json(path, {**body, RECORD: {"sha256": hashlib.sha256(_canonical(body)).hexdigest()}})


def recorded_json(path: str | Path, identity: dict | None = None) -> tuple[dict | None, list[str]]:
    """(the object, why it is not the sound file asked for: [] = it is) of a JSON file written by
    ``write_recorded_json``: it parses, carries a record that its content matches, and its
    identity holds every key of ``identity`` with that value."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        return None, [f"{path.name} is missing"]
    except (OSError, ValueError) as e:
        return None, [f"{path.name} is unreadable ({type(e).__name__}: {e})"]
    return obj, record_problems(obj, path.name, identity)


def record_problems(obj, name: str, identity: dict | None = None) -> list[str]:
    """``recorded_json``'s check of a parsed object (``name``: its file's, for the message)."""
    if not isinstance(obj, dict) or not isinstance(obj.get(RECORD), dict):
        return [f"{name} has no content record (written by a headgeom that did not record one)"]
    body = {k: v for k, v in obj.items() if k != RECORD}
    if hashlib.sha256(_canonical(body)).hexdigest() != obj[RECORD].get("sha256"):
        return [f"{name}: its content does not match its record (an edited value)"]
    have = body.get("identity") if isinstance(body.get("identity"), dict) else {}
    wrong = {k: v for k, v in (identity or {}).items() if have.get(k) != v}
    if wrong:
        return [f"{name} is the record of " + ", ".join(f"{k} {have.get(k)!r}" for k in wrong)
                + ", not of " + ", ".join(f"{k} {v!r}" for k, v in wrong.items()) + " (a sound file at another's path)"]
    return []


def set_problems(prov_path: str | Path, prov: dict | None = None) -> list[str]:
    """Why the files a sidecar describes are not the set it was written with ([] = complete): the
    sidecar is missing, does not match its own record or is another output's (``recorded_json``),
    or a file it lists is missing or does not match the sha256 it records."""
    prov_path = Path(prov_path)
    ident = {"output": prov_path.name.removesuffix(SIDECAR)}
    prov, problems = recorded_json(prov_path, ident) if prov is None else \
        (prov, record_problems(prov, prov_path.name, ident))
    if problems:
        return problems
    outs = prov.get("outputs") if isinstance(prov, dict) else None
    if outs is None:
        return [f"{prov_path.name} records no outputs"]
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
