"""Compare the numbers of two pipeline runs: every Parquet shard and every CSV table.

    .venv/bin/python bench/compare_runs.py OLD_ROOT NEW_ROOT [--moved closure=paper1_heads] [--by-family]

OLD_ROOT and NEW_ROOT are working directories of `make run` (each with results/shards and
results/tables). File hashes differ between any two code versions (provenance records the
code), so this compares data only:

* Parquet shards, matched by relative path: rows matched by their key columns (model, layer,
  head, pair, kind, null, sample, ...), every other column compared value by value; floats
  bitwise (NaN equals NaN), lists element by element.
* ``--moved OLD=NEW``: a family of OLD_ROOT that NEW_ROOT no longer writes (its values now
  live in another family's shards of the same model and layer): each old shard's columns are
  compared with the same columns of the new family's shard, rows matched by key.
* ``--by-family``: shards matched by family and model instead of by path. All shards of one
  (family, model) are concatenated on each side and their rows matched by the key columns, so
  two runs that split a family into different files (another fan-out: parts, null blocks)
  compare. Rows whose keys repeat (e.g. samples without their block) are matched as a sorted
  multiset of whole rows (floats by their bits). ``--moved`` works the same way per family.
* CSV tables (results/tables/*.csv), matched by name: every cell as text (the tables write
  floats with repr, so equal text is equal bits).

Prints counts of files and values compared and every difference; exits 1 on any difference
or any file present on one side only."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

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


def _table(path: Path) -> dict[str, np.ndarray]:
    t = pq.read_table(path)
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


def _concat(paths: list[Path]) -> dict[str, np.ndarray]:
    """The rows of several shards of one family, one after the other."""
    parts = [_table(p) for p in paths]
    cols = list(dict.fromkeys(c for t in parts for c in t))
    out = {}
    for c in cols:
        vals = [t[c] for t in parts if c in t]
        if len(vals) != len(parts):
            raise ValueError(f"column {c!r} is in some shards of the family and not in others")
        out[c] = np.concatenate(vals)
    return out


def compare_shard(old: Path, new: Path, label: str, diffs: list, only_old_columns: bool = False) -> int:
    return compare_columns(_table(old), _table(new), label, diffs, only_old_columns)


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


def compare_csv(old: Path, new: Path, label: str, diffs: list) -> int:
    ra = list(csv.reader(old.open(newline="")))
    rb = list(csv.reader(new.open(newline="")))
    if len(ra) != len(rb) or (ra and ra[0] != rb[0]):
        diffs.append(f"{label}: {len(ra)} vs {len(rb)} rows or different header")
        return 0
    n = 0
    for i, (x, y) in enumerate(zip(ra, rb)):
        if len(x) != len(y):
            diffs.append(f"{label}: row {i} has {len(x)} vs {len(y)} cells")
            continue
        for j, (u, v) in enumerate(zip(x, y)):
            n += 1
            if u != v:
                diffs.append(f"{label}: row {i} column {ra[0][j]!r}: old {u!r}, new {v!r}")
    return n - len(ra[0]) if ra else 0  # header cells are not values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--moved", action="append", default=[], metavar="OLD_FAMILY=NEW_FAMILY")
    ap.add_argument("--by-family", action="store_true",
                    help="match shards by family and model (rows by key), not by path: runs with a different fan-out")
    args = ap.parse_args(argv)
    moved = dict(m.split("=", 1) for m in args.moved)
    diffs: list[str] = []
    if args.by_family:
        counts = {"families": 0, "shards old": 0, "shards new": 0, "rows": 0, "shard values": 0,
                  "moved families": 0, "moved values": 0}
        compare_families(args.old, args.new, moved, counts, diffs)
    else:
        counts = {"shards": 0, "shard values": 0, "moved shards": 0, "moved values": 0}
        compare_paths(args.old, args.new, moved, counts, diffs)
    counts |= {"tables": 0, "table values": 0}
    compare_tables(args.old, args.new, counts, diffs)
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    print(f"differences: {len(diffs)}")
    for d in diffs[:200]:
        print("  " + d)
    return 1 if diffs else 0


def _by_family(root: Path) -> dict[tuple[str, str], list[Path]]:
    """(family, model) -> its shards, from results/shards/<family>/<model>/...parquet."""
    out: dict[tuple[str, str], list[Path]] = {}
    for p in sorted((root / "results" / "shards").rglob("*.parquet")):
        fam, model = p.relative_to(root / "results" / "shards").parts[:2]
        out.setdefault((fam, model), []).append(p)
    return out


def compare_families(old: Path, new: Path, moved: dict, counts: dict, diffs: list) -> None:
    fa, fb = _by_family(old), _by_family(new)
    for fam, model in sorted(set(fa) | set(fb)):
        label = f"{fam}/{model}"
        if (fam, model) in fa and (fam, model) in fb:
            target, key = "families", "shard values"
            a_paths, b_paths, only_old = fa[(fam, model)], fb[(fam, model)], False
        elif (fam, model) in fa and fam in moved:
            if (moved[fam], model) not in fb:
                diffs.append(f"{label}: moved to {moved[fam]}, but {moved[fam]}/{model} is missing")
                continue
            target, key = "moved families", "moved values"
            a_paths, b_paths, only_old = fa[(fam, model)], fb[(moved[fam], model)], True
            label = f"{label} -> {moved[fam]}/{model}"
        else:
            diffs.append(f"{label}: only in {'old' if (fam, model) in fa else 'new'}")
            continue
        try:
            a, b = _concat(a_paths), _concat(b_paths)
        except ValueError as e:
            diffs.append(f"{label}: {e}")
            continue
        counts[target] += 1
        counts["shards old"] += len(a_paths)
        counts["shards new"] += len(b_paths)
        counts["rows"] += len(next(iter(a.values()))) if a else 0
        counts[key] += compare_columns(a, b, label, diffs, only_old_columns=only_old, whole_rows=True)


def compare_paths(old: Path, new: Path, moved: dict, counts: dict, diffs: list) -> None:

    sa = {p.relative_to(old).as_posix() for p in (old / "results" / "shards").rglob("*.parquet")}
    sb = {p.relative_to(new).as_posix() for p in (new / "results" / "shards").rglob("*.parquet")}
    for rel in sorted(sa | sb):
        fam = rel.split("/")[2]
        if rel in sa and rel in sb:
            counts["shards"] += 1
            counts["shard values"] += compare_shard(old / rel, new / rel, rel, diffs)
        elif rel in sa and fam in moved:
            target = rel.replace(f"results/shards/{fam}/", f"results/shards/{moved[fam]}/", 1)
            if target not in sb:
                diffs.append(f"{rel}: moved to {moved[fam]}, but {target} is missing")
                continue
            counts["moved shards"] += 1
            counts["moved values"] += compare_shard(old / rel, new / target, f"{rel} -> {target}", diffs,
                                                    only_old_columns=True)
        else:
            diffs.append(f"{rel}: only in {'old' if rel in sa else 'new'}")


def compare_tables(old: Path, new: Path, counts: dict, diffs: list) -> None:
    ta = {p.name for p in (old / "results" / "tables").glob("*.csv")}
    tb = {p.name for p in (new / "results" / "tables").glob("*.csv")}
    for name in sorted(ta | tb):
        if name in ta and name in tb:
            counts["tables"] += 1
            counts["table values"] += compare_csv(old / "results/tables" / name,
                                                  new / "results/tables" / name, f"tables/{name}", diffs)
        else:
            diffs.append(f"tables/{name}: only in {'old' if name in ta else 'new'}")


if __name__ == "__main__":
    sys.exit(main())
