"""What moved between two runs: ``headgeom diff A B``.

A and B are work directories of the pipeline (each with results/tables and results/shards).
``diff_runs(a, b)`` compares

* every table (results/tables/<name>.csv, the claims ledger aside): rows matched by their key
  (``row_keys``: the shortest run of leading text or integer columns that tells the rows
  apart), every cell compared as written (the CSVs write floats with repr, so equal text is
  equal bits); a changed cell is listed with its old and new value and, for numbers, the
  relative change; rows present on one side only are listed as added or removed;
* the claims ledger (results/tables/claims.csv), entry by entry: those whose verdict changed;
* every figure (figures/<name>.prov.json): those whose PNG or PDF differ byte for byte (the
  figures are written without timestamps) or whose params changed;
* every Parquet shard, matched by path: files equal byte for byte are equal; otherwise rows are
  matched by their key columns and every other column compared bitwise (NaN equals NaN).

``--rev REV`` compares a work directory with the outputs git tracks there at a revision
(``checkout_results``), for a project that commits its tables.

The shard comparison is the data-only one ``bench/compare_runs.py`` makes for a developer's
before/after check of a restructuring (its ``--moved`` and ``--by-family`` modes are there);
both use the functions below."""

from __future__ import annotations

import csv
import filecmp
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from headgeom import layout

# ------------------------------------------------------------------ shards (data only, bitwise)

KEYS = ("model", "layer", "layer_w", "layer_r", "kind", "null", "sample", "test", "head", "head_i", "head_j",
        "head_w", "head_r", "i", "j", "pair", "group", "writer_layer", "reader_layer", "writer", "reader")


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        if a is None or b is None:
            return a is b
        a, b = list(a), list(b)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (np.isnan(a) and np.isnan(b)) or np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


def _column_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row equality; float columns bitwise with NaN == NaN."""
    if a.dtype.kind == "f" and b.dtype.kind == "f" and a.dtype == b.dtype:
        bits = a.view(f"u{a.dtype.itemsize}") == b.view(f"u{b.dtype.itemsize}")
        return bits | (np.isnan(a) & np.isnan(b))
    if a.dtype.kind in "iub" and a.dtype == b.dtype:
        return a == b
    return np.array([_same(x, y) for x, y in zip(a.tolist(), b.tolist())], dtype=bool)


def _largest_rel(a: np.ndarray, b: np.ndarray) -> str:
    """For float columns: the largest |old - new| relative to the column's largest |old|."""
    if a.dtype.kind != "f" or b.dtype.kind != "f":
        return ""
    both = np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return ""
    scale = float(np.max(np.abs(a[both]))) or 1.0
    return f"; largest difference {float(np.max(np.abs(a[both] - b[both]))) / scale:.1e} of the column's scale"


def read_columns(path: Path) -> dict[str, np.ndarray]:
    """A shard's columns, verified first (headgeom.io.shards.shard_check): a damaged shard stops the
    comparison with DamagedFileError naming it. A shard written before shards carried a content
    record or an identity (an older run) is read with its page checksums alone."""
    from headgeom.io.shards import NO_IDENTITY, NO_RECORD, damaged, shard_check

    problems = shard_check(path)[0]
    if problems and not (len(problems) == 1 and problems[0].startswith((NO_RECORD, NO_IDENTITY))):
        raise damaged(path, problems)
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as f:
            t = f.read()
    except OSError as e:
        raise damaged(path, [f"a data page does not read ({e})"]) from e
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def _order(cols: dict, keys: list[str]) -> np.ndarray | None:
    n = len(next(iter(cols.values()))) if cols else 0
    if not keys:
        return np.arange(n)
    rows = list(zip(*(cols[k].tolist() for k in keys)))
    if len(set(rows)) != len(rows):
        return None
    return np.array(sorted(range(n), key=lambda i: tuple(str(x) for x in rows[i])), dtype=np.int64)


def _bits_key(v):
    """A sort key that orders any cell, floats by their bits (NaN as one value)."""
    if isinstance(v, float):
        return ("f", "nan") if np.isnan(v) else ("f", np.float64(v).tobytes().hex())
    if isinstance(v, (list, tuple, np.ndarray)):
        return ("l", tuple(_bits_key(x) for x in list(v)))
    return (type(v).__name__, str(v))


def concat_shards(paths: list[Path]) -> dict[str, np.ndarray]:
    """The rows of several shards of one family, one after the other."""
    parts = [read_columns(p) for p in paths]
    cols = list(dict.fromkeys(c for t in parts for c in t))
    out = {}
    for c in cols:
        vals = [t[c] for t in parts if c in t]
        if len(vals) != len(parts):
            raise ValueError(f"column {c!r} is in some shards of the family and not in others")
        out[c] = np.concatenate(vals)
    return out


def compare_shard(old: Path, new: Path, label: str, diffs: list, only_old_columns: bool = False) -> int:
    """Compare two shards' data; appends one line per differing column to ``diffs``; returns the
    number of values compared."""
    return compare_columns(read_columns(old), read_columns(new), label, diffs, only_old_columns)


def compare_columns(a: dict, b: dict, label: str, diffs: list, only_old_columns: bool = False,
                    whole_rows: bool = False) -> int:
    """Compare two sets of rows: matched by the key columns, or (whole_rows, when the keys
    repeat) as sorted multisets of whole rows."""
    keys = [k for k in KEYS if k in a and k in b]
    cols_a = set(a) if only_old_columns else set(a) | set(b)
    missing = sorted(c for c in cols_a if c not in a or c not in b)
    for c in missing:
        diffs.append(f"{label}: column {c!r} only in {'old' if c in a else 'new'}")
    na, nb = len(next(iter(a.values()))), len(next(iter(b.values())))
    if na != nb:
        diffs.append(f"{label}: {na} rows old, {nb} rows new")
        return 0
    oa, ob = _order(a, keys), _order(b, keys)
    if (oa is None or ob is None) and whole_rows:  # keys repeat: sort whole rows (shared columns)
        # exact-valued columns (ints, strings) first, so a last-bit float change cannot reorder rows
        shared = sorted(cols_a - set(missing), key=lambda c: (a[c].dtype.kind == "f", c))
        oa, ob = (np.array(sorted(range(n), key=lambda i: tuple(_bits_key(t[c][i]) for c in [*keys, *shared])),
                           dtype=np.int64) for t, n in ((a, na), (b, nb)))
    elif oa is None or ob is None:  # keys not unique: compare in stored order
        oa = ob = np.arange(na)
    n = 0
    for c in sorted(cols_a - set(missing)):
        eq = _column_equal(a[c][oa], b[c][ob])
        n += len(eq)
        bad = np.flatnonzero(~eq)
        if bad.size:
            i = bad[0]
            diffs.append(f"{label}: column {c!r}: {bad.size} of {len(eq)} values differ "
                         f"(first: old {a[c][oa][i]!r}, new {b[c][ob][i]!r}){_largest_rel(a[c][oa], b[c][ob])}")
    return n


def shard_paths(root: Path) -> set[str]:
    """Every shard of a run, relative to its work directory."""
    return {p.relative_to(root).as_posix() for p in (Path(root) / layout.SHARDS_ROOT).rglob("*.parquet")}


def diff_shards(a: Path, b: Path) -> dict:
    """Shards matched by path: {'compared', 'identical_files', 'values', 'differ': [{path, status,
    differences}]}; a file equal byte for byte is not read."""
    sa, sb = shard_paths(a), shard_paths(b)
    out = {"compared": 0, "identical_files": 0, "values": 0, "differ": []}
    for rel in sorted(sa | sb):
        if rel not in sa or rel not in sb:
            out["differ"].append({"path": rel, "status": "only in A" if rel in sa else "only in B", "differences": []})
            continue
        out["compared"] += 1
        if filecmp.cmp(a / rel, b / rel, shallow=False):
            out["identical_files"] += 1
            continue
        lines: list[str] = []
        out["values"] += compare_shard(a / rel, b / rel, rel, lines)
        if lines:
            out["differ"].append({"path": rel, "status": "differs", "differences": lines})
    return out


# ------------------------------------------------------------------ tables (cells, rows)

CLAIMS = "claims"


def _is_num(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _is_key_cell(cell: str) -> bool:
    """A cell that can name a row: text, or an integer (a layer, a distance), not a float."""
    if not _is_num(cell):
        return True
    return cell.lstrip("+-").isdigit()


def row_keys(header: list[str], *tables: list[list[str]]) -> list[str]:
    """The columns that name a table's rows: the shortest run of leading columns holding only
    text or integers whose values tell every row apart in each of ``tables``; when none does,
    every leading text or integer column (rows with equal keys are then matched by their
    position among them)."""
    for n in range(1, len(header) + 1):
        if not all(_is_key_cell(r[n - 1]) for t in tables for r in t):
            return header[: n - 1]
        if all(len({tuple(r[:n]) for r in t}) == len(t) for t in tables):
            return header[:n]
    return list(header)


def _keyed(rows: list[list[str]], nkeys: int) -> dict[tuple, list[str]]:
    """Rows by key; rows with the same key are told apart by their position among them."""
    out, seen = {}, {}
    for r in rows:
        k = tuple(r[:nkeys])
        seen[k] = seen.get(k, 0) + 1
        out[k if seen[k] == 1 else (*k, f"#{seen[k]}")] = r
    return out


def relative_change(old: str, new: str) -> float | None:
    """(new - old) / |old| for two numeric cells; None when either is not a finite number or old is 0."""
    try:
        a, b = float(old), float(new)
    except ValueError:
        return None
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return None
    return (b - a) / abs(a)


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return (rows[0], rows[1:]) if rows else ([], [])


def diff_table(a: Path, b: Path) -> dict:
    """One table's changes: {'keys', 'cells': [{row, column, old, new, rel}], 'added': [row], 'removed':
    [row], 'columns_added', 'columns_removed'}; a row is named by {key column: value}."""
    ha, ra = read_table(a)
    hb, rb = read_table(b)
    shared = [c for c in ha if c in hb]
    ia, ib = [ha.index(c) for c in shared], [hb.index(c) for c in shared]
    ra = [[r[i] if i < len(r) else "" for i in ia] for r in ra]
    rb = [[r[i] if i < len(r) else "" for i in ib] for r in rb]
    keys = row_keys(shared, ra, rb)
    ka, kb = _keyed(ra, len(keys)), _keyed(rb, len(keys))

    def name(k):
        return {**dict(zip(keys, k)), **({"#": k[len(keys)]} if len(k) > len(keys) else {})}

    cells = []
    for k in ka:
        if k not in kb:
            continue
        for j, col in enumerate(shared[len(keys):], start=len(keys)):
            old, new = ka[k][j], kb[k][j]
            if old != new:
                cells.append({"row": name(k), "column": col, "old": old, "new": new, "rel": relative_change(old, new)})
    return {"keys": keys, "cells": cells,
            "added": [name(k) for k in kb if k not in ka], "removed": [name(k) for k in ka if k not in kb],
            "columns_added": [c for c in hb if c not in ha], "columns_removed": [c for c in ha if c not in hb]}


def _tables(root: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted((Path(root) / layout.TABLES_DIR).glob("*.csv"))}


def diff_ledger(a: Path, b: Path) -> list[dict]:
    """The ledger entries whose verdict (status) changed, or that one side lacks."""
    def load(p):
        with open(p, newline="") as fh:
            r = csv.DictReader(fh)
            if not {"id", "status"} <= set(r.fieldnames or []):
                raise ValueError(f"{p}: not a claims table (no id and status columns)")
            return {row["id"]: row for row in r}
    la, lb = load(a), load(b)
    out = []
    for cid in list(la) + [c for c in lb if c not in la]:
        x, y = la.get(cid), lb.get(cid)
        if x is None or y is None or x.get("status") != y.get("status"):
            out.append({"id": cid, "paper_value": (x or y).get("paper_value", ""),
                        "old": x.get("status") if x else None, "new": y.get("status") if y else None,
                        "pipeline_old": x.get("pipeline") if x else None,
                        "pipeline_new": y.get("pipeline") if y else None})
    return out


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[prefix + str(k)] = v
    return out


def diff_figures(a: Path, b: Path) -> list[dict]:
    """Figures redrawn differently: {name, status ('differs' | 'only in A' | 'only in B'), files: the
    formats whose bytes differ, params: {key: [old, new]} from the provenance sidecars}."""
    def figs(root):
        return {p.name.removesuffix(".prov.json"): p for p in sorted((root / layout.FIGURES_DIR).glob("*.prov.json"))}

    fa, fb = figs(a), figs(b)
    out = []
    for name in sorted(set(fa) | set(fb)):
        if name not in fa or name not in fb:
            out.append({"name": name, "status": "only in A" if name in fa else "only in B", "files": [], "params": {}})
            continue
        files = [f"{name}.{ext}" for ext in layout.FIGURE_EXTS
                 if (fa[name].parent / f"{name}.{ext}").exists() != (fb[name].parent / f"{name}.{ext}").exists()
                 or ((fa[name].parent / f"{name}.{ext}").exists()
                     and not filecmp.cmp(fa[name].parent / f"{name}.{ext}", fb[name].parent / f"{name}.{ext}",
                                         shallow=False))]
        try:
            pa, pb = (_flat(json.loads(p.read_text()).get("params")) for p in (fa[name], fb[name]))
        except (OSError, ValueError):
            pa = pb = {}
        params = {k: [pa.get(k), pb.get(k)] for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)}
        if files or params:
            out.append({"name": name, "status": "differs", "files": files, "params": params})
    return out


def diff_runs(a, b, *, shards: bool = True) -> dict:
    """Everything that moved between the runs in work directories ``a`` and ``b`` (see the module
    docstring); ``changed`` is False only when no table cell, row, ledger verdict, figure or shard differs."""
    a, b = Path(a), Path(b)
    for root in (a, b):
        if not (root / layout.TABLES_DIR).is_dir():
            raise FileNotFoundError(f"{root}: no {layout.TABLES_DIR} (not a run directory, or the run has not "
                                    "built any table)")
    ta, tb = _tables(a), _tables(b)
    tables, only = {}, {"A": [], "B": []}
    for t in sorted(set(ta) | set(tb)):
        if t not in ta or t not in tb:
            only["A" if t in ta else "B"].append(t)
        elif t != CLAIMS:
            d = diff_table(ta[t], tb[t])
            if d["cells"] or d["added"] or d["removed"] or d["columns_added"] or d["columns_removed"]:
                tables[t] = d
    ledger = diff_ledger(ta[CLAIMS], tb[CLAIMS]) if CLAIMS in ta and CLAIMS in tb else []
    res = {"a": str(a), "b": str(b), "tables_compared": len(set(ta) & set(tb) - {CLAIMS}), "tables": tables,
           "tables_only": only, "ledger": ledger, "figures": diff_figures(a, b),
           "shards": diff_shards(a, b) if shards else None}
    res["changed"] = bool(tables or only["A"] or only["B"] or ledger or res["figures"]
                          or (shards and res["shards"]["differ"]))
    return res


# ------------------------------------------------------------------ a git revision's results


def checkout_results(workdir, rev: str, dest) -> Path:
    """The run outputs git tracks at revision ``rev`` (results/tables, results/shards, figures of
    the work directory ``workdir``, where a project versions them) written under ``dest``, as a
    work directory ``diff_runs`` can compare. FileNotFoundError when ``rev`` tracks no table there
    (this repository ignores results/; a paper's repository may commit its tables)."""
    import io
    import subprocess
    import tarfile

    workdir = Path(workdir).resolve()

    def git(*args, binary=False, cwd=workdir):
        r = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=not binary, timeout=300)
        if r.returncode:
            err = r.stderr if not binary else r.stderr.decode(errors="replace")
            raise FileNotFoundError(f"git {' '.join(args[:2])}: {err.strip()}")
        return r.stdout

    prefix = git("rev-parse", "--show-prefix").strip()
    top = git("rev-parse", "--show-toplevel").strip()  # paths below are relative to it
    paths = [f"{prefix}{p}" for p in (layout.TABLES_DIR, layout.SHARDS_ROOT, layout.FIGURES_DIR)]
    tracked = git("ls-tree", "-r", "--name-only", rev, "--", *paths, cwd=top).splitlines()
    if not any(t.startswith(paths[0] + "/") for t in tracked):
        raise FileNotFoundError(f"revision {rev} tracks no {layout.TABLES_DIR} under {workdir} (results are not "
                                "committed here); compare two run directories instead: headgeom diff A B")
    data = git("archive", "--format=tar", rev, "--", *[p for p in paths if any(t.startswith(p + "/") for t in tracked)],
               binary=True, cwd=top)
    dest = Path(dest)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest / prefix if prefix else dest


# ------------------------------------------------------------------ rendering


def _row_label(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items()) or "(the row)"


def _rel(rel) -> str:
    return "" if rel is None else f"  ({rel:+.3g} relative)" if abs(rel) < 1e-3 else f"  ({100 * rel:+.3g} %)"


def _short(v, n: int = 60) -> str:
    t = json.dumps(v, default=str)
    return t if len(t) <= n else t[: n - 1] + "…"


def render(res: dict, max_lines: int = 40) -> str:
    """The compact text view: one line per changed cell (at most ``max_lines`` per table)."""
    out = []
    ncells = sum(len(d["cells"]) for d in res["tables"].values())
    sh = res["shards"]
    out.append(f"headgeom diff {res['a']} -> {res['b']}")
    out.append(f"tables: {res['tables_compared']} compared, {len(res['tables'])} changed, {ncells} cells moved")
    for name, d in res["tables"].items():
        out.append(f"  {name}  (rows by {', '.join(d['keys']) or 'position'})")
        lines = [f"    {_row_label(c['row'])}  {c['column']}: {c['old']} -> {c['new']}{_rel(c['rel'])}"
                 for c in d["cells"]]
        lines += [f"    + row {_row_label(r)}" for r in d["added"]]
        lines += [f"    - row {_row_label(r)}" for r in d["removed"]]
        lines += [f"    + column {c}" for c in d["columns_added"]] + [f"    - column {c}" for c in d["columns_removed"]]
        out += lines[:max_lines] + ([f"    … {len(lines) - max_lines} more (--json for all)"]
                                    if len(lines) > max_lines else [])
    for side, names in res["tables_only"].items():
        if names:
            out.append(f"  only in {side}: {', '.join(names)}")
    out.append(f"ledger: {len(res['ledger'])} verdicts changed")
    for e in res["ledger"][:max_lines]:
        out.append(f"  {e['id']}: {e['old']} -> {e['new']}  (paper {e['paper_value']}; pipeline "
                   f"{e['pipeline_old']} -> {e['pipeline_new']})")
    out.append(f"figures: {len(res['figures'])} differ")
    for f in res["figures"][:max_lines]:
        what = [f"{', '.join(f['files'])} redrawn"] if f["files"] else []
        what += [f"{k}: {_short(o)} -> {_short(n)}" for k, (o, n) in f["params"].items()]
        out.append(f"  {f['name']}: {f['status']}" + (f" ({'; '.join(what)})" if what else ""))
    if sh is not None:
        out.append(f"shards: {sh['compared']} compared ({sh['identical_files']} identical files, "
                   f"{sh['values']} values compared in the rest), {len(sh['differ'])} differ")
        for s in sh["differ"][:max_lines]:
            out.append(f"  {s['path']}: {s['status']}" + "".join(f"\n    {x}" for x in s["differences"][:3]))
    out.append("changed" if res["changed"] else
               "identical: no table cell, row, ledger verdict, figure" + (" or shard" if sh is not None else "")
               + " differs")
    return "\n".join(out) + "\n"


def render_json(res: dict) -> str:
    return json.dumps(res, indent=1, allow_nan=False, default=str)
