"""Compare the numbers of two pipeline runs: every Parquet shard and every CSV table.

    .venv/bin/python bench/compare_runs.py OLD_ROOT NEW_ROOT [--moved closure=paper1_heads]

OLD_ROOT and NEW_ROOT are working directories of `make run` (each with results/shards and
results/tables). File hashes differ between any two code versions (provenance records the
code), so this compares data only:

* Parquet shards, matched by relative path: rows matched by their key columns (model, layer,
  head, pair, kind, null, sample, ...), every other column compared value by value; floats
  bitwise (NaN equals NaN), lists element by element.
* ``--moved OLD=NEW``: a family of OLD_ROOT that NEW_ROOT no longer writes (its values now
  live in another family's shards of the same model and layer): each old shard's columns are
  compared with the same columns of the new family's shard, rows matched by key.
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
        "head_w", "head_r", "i", "j", "pair", "group")


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


def compare_shard(old: Path, new: Path, label: str, diffs: list, only_old_columns: bool = False) -> int:
    a, b = _table(old), _table(new)
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
    if oa is None or ob is None:  # keys not unique: compare in stored order
        oa = ob = np.arange(na)
    n = 0
    for c in sorted(cols_a - set(missing)):
        eq = _column_equal(a[c][oa], b[c][ob])
        n += len(eq)
        bad = np.flatnonzero(~eq)
        if bad.size:
            i = bad[0]
            diffs.append(f"{label}: column {c!r}: {bad.size} of {len(eq)} values differ "
                         f"(first: old {a[c][oa][i]!r}, new {b[c][ob][i]!r})")
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
    args = ap.parse_args(argv)
    moved = dict(m.split("=", 1) for m in args.moved)
    diffs: list[str] = []
    counts = {"shards": 0, "shard values": 0, "moved shards": 0, "moved values": 0, "tables": 0, "table values": 0}

    sa = {p.relative_to(args.old).as_posix() for p in (args.old / "results" / "shards").rglob("*.parquet")}
    sb = {p.relative_to(args.new).as_posix() for p in (args.new / "results" / "shards").rglob("*.parquet")}
    for rel in sorted(sa | sb):
        fam = rel.split("/")[2]
        if rel in sa and rel in sb:
            counts["shards"] += 1
            counts["shard values"] += compare_shard(args.old / rel, args.new / rel, rel, diffs)
        elif rel in sa and fam in moved:
            target = rel.replace(f"results/shards/{fam}/", f"results/shards/{moved[fam]}/", 1)
            if target not in sb:
                diffs.append(f"{rel}: moved to {moved[fam]}, but {target} is missing")
                continue
            counts["moved shards"] += 1
            counts["moved values"] += compare_shard(args.old / rel, args.new / target, f"{rel} -> {target}", diffs,
                                                    only_old_columns=True)
        else:
            diffs.append(f"{rel}: only in {'old' if rel in sa else 'new'}")

    ta = {p.name for p in (args.old / "results" / "tables").glob("*.csv")}
    tb = {p.name for p in (args.new / "results" / "tables").glob("*.csv")}
    for name in sorted(ta | tb):
        if name in ta and name in tb:
            counts["tables"] += 1
            counts["table values"] += compare_csv(args.old / "results/tables" / name,
                                                  args.new / "results/tables" / name, f"tables/{name}", diffs)
        else:
            diffs.append(f"tables/{name}: only in {'old' if name in ta else 'new'}")

    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    print(f"differences: {len(diffs)}")
    for d in diffs[:200]:
        print("  " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
