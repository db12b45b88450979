"""bench/compare_runs.py: the before/after check of a restructuring finds a one-ulp change,
treats NaN as equal to NaN, matches rows by key whatever their order, follows a family whose
values moved into another family's shards, and compares a renamed family in full under its new name."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headgeom.io.shards import write_shard
import compare_runs


def _run(root: Path, P, order=(0, 1, 2), moved=False, extra_cols=False, csv="a,b\n1,0.5\n", both=False):
    cols = {"model": np.array(["m"] * 3, dtype=object), "layer": np.zeros(3, dtype=np.int64),
            "head": np.array(order, dtype=np.int64), "P": np.asarray(P, float)[list(order)],
            "lists": np.array([[1.0, float("nan")], [2.0], []], dtype=object)[list(order)]}
    if extra_cols:
        cols["other"] = np.arange(3.0)[list(order)]
    write_shard(root / f"results/shards/{'heads' if moved else 'closure'}/m/layer0.parquet", cols, {"job": "x"})
    if both:  # the old run also wrote the family the values move to
        write_shard(root / "results/shards/heads/m/layer0.parquet", {**cols, "other": np.arange(3.0)}, {"job": "x"})
    (root / "results/tables").mkdir(parents=True, exist_ok=True)
    (root / "results/tables/t.csv").write_text(csv)
    return root


def test_identical_runs_compare_equal_with_nan_and_reordered_rows(tmp_path, capsys):
    old = _run(tmp_path / "old", [0.1, float("nan"), 0.3])
    new = _run(tmp_path / "new", [0.1, float("nan"), 0.3], order=(2, 0, 1))
    assert compare_runs.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "shards: 1, shard values: 15" in out and "table values: 2" in out and "differences: 0" in out


def test_one_ulp_is_a_difference(tmp_path, capsys):
    old = _run(tmp_path / "old", [0.1, 0.2, 0.3])
    new = _run(tmp_path / "new", [0.1, np.nextafter(0.2, 1.0), 0.3])
    assert compare_runs.main([str(old), str(new)]) == 1
    assert "column 'P': 1 of 3 values differ" in capsys.readouterr().out


def test_a_csv_cell_change_is_a_difference(tmp_path, capsys):
    old = _run(tmp_path / "old", [0.1, 0.2, 0.3])
    new = _run(tmp_path / "new", [0.1, 0.2, 0.3], csv="a,b\n1,0.50000001\n")
    assert compare_runs.main([str(old), str(new)]) == 1
    assert "tables/t.csv: row 1 column 'b'" in capsys.readouterr().out


def test_moved_family_is_matched_by_key_on_the_old_columns(tmp_path, capsys):
    old = _run(tmp_path / "old", [0.1, 0.2, 0.3], both=True)
    new = _run(tmp_path / "new", [0.1, 0.2, 0.3], moved=True, extra_cols=True, order=(1, 2, 0))
    assert compare_runs.main([str(old), str(new)]) == 1  # without --moved: present on one side only
    capsys.readouterr()
    assert compare_runs.main([str(old), str(new), "--moved", "closure=heads"]) == 0
    assert "shards: 1, shard values: 18, moved shards: 1, moved values: 15" in capsys.readouterr().out
    bad = _run(tmp_path / "bad", [0.1, 0.2, 0.31], moved=True, extra_cols=True)
    assert compare_runs.main([str(old), str(bad), "--moved", "closure=heads"]) == 1


def _fanned(root: Path, values, parts, sample_dup=False):
    """A cross-layer family written in `parts` files (another fan-out splits the same rows
    differently); sample_dup: two rows per key (a key column the family does not store)."""
    n = len(values)
    cols = {"model": np.array(["m"] * n, dtype=object), "layer_w": np.repeat(np.arange(n // 2), 2).astype(np.int64),
            "layer_r": np.tile(np.array([5, 6]), n // 2).astype(np.int64), "rho": np.asarray(values, float)}
    if sample_dup:
        cols["layer_r"] = np.full(n, 5, dtype=np.int64)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    for p, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        write_shard(root / f"results/shards/pk_cross/m/part{p}.parquet", {k: v[a:b] for k, v in cols.items()},
                    {"job": "x"})
    (root / "results/tables").mkdir(parents=True, exist_ok=True)
    return root


def test_by_family_matches_runs_with_a_different_fan_out(tmp_path, capsys):
    vals = [0.1, float("nan"), 0.3, 0.4, 0.5, 0.6]
    old = _fanned(tmp_path / "old", vals, parts=3)
    new = _fanned(tmp_path / "new", vals, parts=1)
    assert compare_runs.main([str(old), str(new)]) == 1  # by path: part1, part2 only in old
    assert "part1.parquet: only in old" in capsys.readouterr().out
    assert compare_runs.main([str(old), str(new), "--by-family"]) == 0
    out = capsys.readouterr().out
    assert "families: 1, shards old: 3, shards new: 1, rows: 6, shard values: 24" in out and "differences: 0" in out
    bad = _fanned(tmp_path / "bad", [0.1, float("nan"), 0.3, np.nextafter(0.4, 1.0), 0.5, 0.6], parts=2)
    assert compare_runs.main([str(old), str(bad), "--by-family"]) == 1
    assert "pk_cross/m: column 'rho': 1 of 6 values differ" in capsys.readouterr().out
    short = _fanned(tmp_path / "short", vals[:4], parts=1)
    assert compare_runs.main([str(old), str(short), "--by-family"]) == 1
    assert "6 rows old, 4 rows new" in capsys.readouterr().out


def test_by_family_matches_repeated_keys_as_whole_rows(tmp_path, capsys):
    old = _fanned(tmp_path / "old", [0.1, 0.2, 0.3, 0.4], parts=2, sample_dup=True)
    # the same rows in another order across other files: equal as a multiset of rows
    new = _fanned(tmp_path / "new", [0.2, 0.1, 0.4, 0.3], parts=1, sample_dup=True)
    assert compare_runs.main([str(old), str(new), "--by-family"]) == 0
    capsys.readouterr()
    # a value moved from one key to another is a difference even though the value set is the same
    moved = _fanned(tmp_path / "moved", [0.3, 0.2, 0.1, 0.4], parts=1, sample_dup=True)
    assert compare_runs.main([str(old), str(moved), "--by-family"]) == 1


def _read_paths(root: Path, share, order):
    """A read-path-like family: rows keyed by writer/reader layer and head, not by `layer`."""
    n = len(share)
    cols = {"model": np.array(["m"] * n, dtype=object), "kind": np.array(["Q"] * n, dtype=object),
            "writer_layer": np.zeros(n, dtype=np.int64), "reader_layer": np.ones(n, dtype=np.int64),
            "writer": np.arange(n, dtype=np.int64) // 2, "reader": np.arange(n, dtype=np.int64) % 2,
            "share": np.asarray(share, float)}
    cols = {k: v[list(order)] for k, v in cols.items()}
    write_shard(root / "results/shards/read_paths/m/layer0.parquet", cols, {"job": "x"})
    (root / "results/tables").mkdir(parents=True, exist_ok=True)
    return root


def test_by_family_last_bit_change_names_only_the_float_column(tmp_path, capsys):
    # The rows are unique by (writer, reader) heads; a last-bit change in `share` that
    # reorders the values must not show up as a difference in the key columns.
    share = [0.4, 0.3, 0.2, 0.1]
    old = _read_paths(tmp_path / "old", share, order=(0, 1, 2, 3))
    new = _read_paths(tmp_path / "new", [np.nextafter(0.4, 0.0), 0.3, 0.2, 0.1], order=(3, 1, 2, 0))
    assert compare_runs.main([str(old), str(new), "--by-family"]) == 1
    out = capsys.readouterr().out
    assert "column 'share': 1 of 4 values differ" in out
    assert "largest difference 1.4e-16 of the column's scale" in out
    assert not any(f"column '{k}'" in out for k in ("writer", "reader", "writer_layer", "reader_layer"))


def test_renamed_family_is_compared_in_full_under_its_new_name(tmp_path, capsys):
    old = _run(tmp_path / "old", [0.1, 0.2, 0.3])  # family "closure"
    new = _run(tmp_path / "new", [0.1, 0.2, 0.3], moved=True, order=(2, 1, 0))  # the same shard, family "heads"
    assert compare_runs.main([str(old), str(new)]) == 1  # by path: present on one side only
    capsys.readouterr()
    assert compare_runs.main([str(old), str(new), "--renamed", "closure=heads"]) == 0
    assert "shards: 1, shard values: 15, moved shards: 0, moved values: 0, renamed shards: 1" in capsys.readouterr().out
    assert compare_runs.main([str(old), str(new), "--renamed", "closure=heads", "--by-family"]) == 0
    assert "renamed families: 1" in capsys.readouterr().out
    # every column both ways: a column the new family adds is a difference (not so under --moved)
    extra = _run(tmp_path / "extra", [0.1, 0.2, 0.3], moved=True, extra_cols=True)
    assert compare_runs.main([str(old), str(extra), "--renamed", "closure=heads"]) == 1
    bad = _run(tmp_path / "bad", [0.1, 0.2, np.nextafter(0.3, 1.0)], moved=True)
    assert compare_runs.main([str(old), str(bad), "--renamed", "closure=heads"]) == 1
    assert "results/shards/closure/m/layer0.parquet -> results/shards/heads/m/layer0.parquet: column 'P'" in \
        capsys.readouterr().out
    assert compare_runs.main([str(old), str(bad), "--renamed", "closure=heads", "--by-family"]) == 1
