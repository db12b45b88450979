"""Compare the numbers of two pipeline runs: every Parquet shard and every CSV table.

    .venv/bin/python bench/compare_runs.py OLD_ROOT NEW_ROOT [--renamed pk=pk_within] [--moved closure=paper1_heads]
                                                              [--by-family]

OLD_ROOT and NEW_ROOT are working directories of `make run` (each with results/shards and
results/tables). File hashes differ between any two code versions (provenance records the
code), so this compares data only:

* Parquet shards, matched by relative path: rows matched by their key columns (model, layer,
  head, pair, kind, null, sample, ...), every other column compared value by value; floats
  bitwise (NaN equals NaN), lists element by element.
* ``--renamed OLD=NEW``: a family of OLD_ROOT that NEW_ROOT writes under another name (the same
  shards, e.g. the within-layer pairs ``pk`` -> ``pk_within``): each old shard is compared with the
  new family's shard at the same place as any shard is (every column both ways), and counted among
  the shards; a renamed shard missing from NEW_ROOT is a difference.
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
or any file present on one side only. The comparison functions are headgeom.verify.diff's, which
``headgeom diff`` (what moved between two runs, for users) also uses."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from headgeom.verify.diff import compare_columns, compare_shard, concat_shards


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
    ap.add_argument("--renamed", action="append", default=[], metavar="OLD_FAMILY=NEW_FAMILY",
                    help="a family NEW_ROOT writes under another name: its shards compared in full")
    ap.add_argument("--moved", action="append", default=[], metavar="OLD_FAMILY=NEW_FAMILY")
    ap.add_argument("--by-family", action="store_true",
                    help="match shards by family and model (rows by key), not by path: runs with a different fan-out")
    args = ap.parse_args(argv)
    moved = dict(m.split("=", 1) for m in args.moved)
    renamed = dict(m.split("=", 1) for m in args.renamed)
    diffs: list[str] = []
    if args.by_family:
        counts = {"families": 0, "shards old": 0, "shards new": 0, "rows": 0, "shard values": 0,
                  "moved families": 0, "moved values": 0} | ({"renamed families": 0} if renamed else {})
        compare_families(args.old, args.new, moved, counts, diffs, renamed)
    else:
        counts = {"shards": 0, "shard values": 0, "moved shards": 0, "moved values": 0} | (
            {"renamed shards": 0} if renamed else {})
        compare_paths(args.old, args.new, moved, counts, diffs, renamed)
    counts |= {"tables": 0, "table values": 0}
    compare_tables(args.old, args.new, counts, diffs)
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    print(f"differences: {len(diffs)}")
    for d in diffs[:200]:
        print("  " + d)
    return 1 if diffs else 0


def _by_family(root: Path, renamed: dict | None = None) -> dict[tuple[str, str], list[Path]]:
    """(family, model) -> its shards, from results/shards/<family>/<model>/...parquet; a family of
    ``renamed`` (old -> new name) under its new name."""
    out: dict[tuple[str, str], list[Path]] = {}
    for p in sorted((root / "results" / "shards").rglob("*.parquet")):
        fam, model = p.relative_to(root / "results" / "shards").parts[:2]
        out.setdefault(((renamed or {}).get(fam, fam), model), []).append(p)
    return out


def compare_families(old: Path, new: Path, moved: dict, counts: dict, diffs: list, renamed: dict | None = None) -> None:
    renamed = renamed or {}
    fa, fb = _by_family(old, renamed), _by_family(new)
    for fam, model in sorted(set(fa) | set(fb)):
        label = f"{fam}/{model}"
        if fam in renamed.values() and (fam, model) in fa:
            counts["renamed families"] += 1
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
            a, b = concat_shards(a_paths), concat_shards(b_paths)
        except ValueError as e:
            diffs.append(f"{label}: {e}")
            continue
        counts[target] += 1
        counts["shards old"] += len(a_paths)
        counts["shards new"] += len(b_paths)
        counts["rows"] += len(next(iter(a.values()))) if a else 0
        counts[key] += compare_columns(a, b, label, diffs, only_old_columns=only_old, whole_rows=True)


def renamed_path(rel: str, renamed: dict) -> str:
    """A shard's path (results/shards/<family>/...) with its family under its new name, if renamed."""
    parts = rel.split("/")
    return "/".join([*parts[:2], renamed.get(parts[2], parts[2]), *parts[3:]])


def compare_paths(old: Path, new: Path, moved: dict, counts: dict, diffs: list, renamed: dict | None = None) -> None:
    renamed = renamed or {}
    # old shards by the path they have in NEW_ROOT (a renamed family's under its new name)
    sa = {renamed_path(p.relative_to(old).as_posix(), renamed): p.relative_to(old).as_posix()
          for p in (old / "results" / "shards").rglob("*.parquet")}
    sb = {p.relative_to(new).as_posix() for p in (new / "results" / "shards").rglob("*.parquet")}
    for rel in sorted(set(sa) | sb):
        fam = rel.split("/")[2]
        if rel in sa and rel in sb:
            counts["shards"] += 1
            if sa[rel] != rel:
                counts["renamed shards"] += 1
            label = rel if sa[rel] == rel else f"{sa[rel]} -> {rel}"
            counts["shard values"] += compare_shard(old / sa[rel], new / rel, label, diffs)
        elif rel in sa and fam in moved:
            target = rel.replace(f"results/shards/{fam}/", f"results/shards/{moved[fam]}/", 1)
            if target not in sb:
                diffs.append(f"{rel}: moved to {moved[fam]}, but {target} is missing")
                continue
            counts["moved shards"] += 1
            counts["moved values"] += compare_shard(old / sa[rel], new / target, f"{rel} -> {target}", diffs,
                                                    only_old_columns=True)
        else:
            diffs.append(f"{sa.get(rel, rel)}: only in {'old' if rel in sa else 'new'}")


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
