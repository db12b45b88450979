"""bench/compare_runs.py: the before/after check of a restructuring finds a one-ulp change,
treats NaN as equal to NaN, matches rows by key whatever their order, and follows a family
whose values moved into another family's shards."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from headgeom.io.shards import write_shard

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "bench" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


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
