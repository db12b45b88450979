"""headgeom diff (headgeom.verify.diff): table cells matched by row key, rows added and removed,
ledger verdicts, shards; identical runs say so and exit 0. The end-to-end check against a
rebuilt run is tests/workflow/test_diff.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headgeom.cli import main as cli
from headgeom.io.shards import write_shard
from headgeom.verify.diff import diff_runs, relative_change, row_keys

T = "model,kind,distance,layer_pairs,mean_rho,flag\n"
ROWS = ["a,K,1,17,0.37290001060287126,True", "a,K,2,16,0.375,False", "a,Q,1,17,0.25,True", "b,K,1,9,0.5,nan"]
LEDGER = "id,paper,status,pipeline,paper_value\nx.1,p1,agrees,0.37,0.37\nx.2,pk,differs,3,4\n"


def _run(root: Path, rows=ROWS, ledger=LEDGER, rho=(0.1, 0.2, 0.3)) -> Path:
    (root / "results/tables").mkdir(parents=True)
    (root / "results/tables/t.csv").write_text(T + "\n".join(rows) + "\n")
    (root / "results/tables/u.csv").write_text("model,D\na,384\n")
    (root / "results/tables/claims.csv").write_text(ledger)
    write_shard(root / "results/shards/closure/a/layer0.parquet",
                {"model": np.array(["a"] * 3, dtype=object), "layer": np.zeros(3, dtype=np.int64),
                 "head": np.arange(3, dtype=np.int64), "P": np.asarray(rho, float)}, {"job": "x"})
    return root


def test_row_keys_are_the_shortest_leading_run_that_names_every_row():
    h = T.strip().split(",")
    rows = [r.split(",") for r in ROWS]
    assert row_keys(h, rows) == ["model", "kind", "distance"]
    assert row_keys(h, rows[:1] + rows[3:]) == ["model"]
    # a float column ends the run: rows that only a float tells apart are matched by position
    assert row_keys(["x", "v"], [["1", "0.5"], ["1", "0.7"]]) == ["x"]
    assert row_keys(["v", "x"], [["0.5", "1"], ["0.7", "1"]]) == []


def test_identical_runs_say_so_and_exit_0(tmp_path, capsys):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    res = diff_runs(a, b)
    assert not res["changed"] and res["tables_compared"] == 2 and res["shards"]["identical_files"] == 1
    assert cli(["diff", str(a), str(b), "--fail-on-change"]) == 0
    assert "identical: no table cell, row, ledger verdict, figure or shard differs" in capsys.readouterr().out


def test_exactly_the_moved_cells_rows_and_verdicts(tmp_path, capsys):
    a = _run(tmp_path / "a")
    rows = list(ROWS)
    rows[1] = "a,K,2,16,0.4,False"  # one cell moves
    rows[3] = "b,K,1,9,0.5,True"  # nan -> True
    rows = rows[1:] + ["c,V,1,3,0.1,False"]  # first row removed, one added, order changed
    b = _run(tmp_path / "b", rows=rows, ledger=LEDGER.replace("x.2,pk,differs,3", "x.2,pk,agrees,4"))
    res = diff_runs(a, b, shards=False)
    t = res["tables"]["t"]
    assert t["keys"] == ["model", "kind", "distance"]
    assert [(c["row"], c["column"], c["old"], c["new"]) for c in t["cells"]] == [
        ({"model": "a", "kind": "K", "distance": "2"}, "mean_rho", "0.375", "0.4"),
        ({"model": "b", "kind": "K", "distance": "1"}, "flag", "nan", "True")]
    assert t["cells"][0]["rel"] == pytest.approx((0.4 - 0.375) / 0.375) and t["cells"][1]["rel"] is None
    assert t["removed"] == [{"model": "a", "kind": "K", "distance": "1"}]
    assert t["added"] == [{"model": "c", "kind": "V", "distance": "1"}]
    assert list(res["tables"]) == ["t"]  # u.csv did not move
    assert [(e["id"], e["old"], e["new"]) for e in res["ledger"]] == [("x.2", "differs", "agrees")]
    assert cli(["diff", str(a), str(b), "--no-shards", "--fail-on-change"]) == 1
    out = capsys.readouterr().out
    assert "model=a, kind=K, distance=2  mean_rho: 0.375 -> 0.4  (+6.67 %)" in out
    assert "x.2: differs -> agrees" in out
    assert cli(["diff", str(a), str(b), "--json"]) == 0  # without --fail-on-change: 0
    assert json.loads(capsys.readouterr().out)["tables"]["t"]["cells"][0]["new"] == "0.4"


def test_one_ulp_in_a_shard_is_a_difference(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", rho=(0.1, np.nextafter(0.2, 1.0), 0.3))
    res = diff_runs(a, b)
    assert res["changed"] and not res["tables"] and not res["ledger"]
    (s,) = res["shards"]["differ"]
    assert s["path"] == "results/shards/closure/a/layer0.parquet" and "column 'P': 1 of 3 values differ" in s["differences"][0]


def test_a_damaged_shard_is_named_not_compared(tmp_path, capsys):
    """diff verifies every shard it reads: a changed byte is damage (exit 2, the file named), not a
    difference in values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    shard = b / "results/shards/closure/a/layer0.parquet"
    data = bytearray(shard.read_bytes())
    data[4] ^= 0x01  # a byte of the first data page (Parquet's 4-byte magic precedes it)
    shard.write_bytes(bytes(data))
    assert cli(["diff", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "layer0.parquet is damaged" in err and "rebuild it" in err
    # a shard that decodes cleanly but whose values no longer match its content record (the footer
    # kept, one value changed): damage too, never a value difference
    t = pq.read_table(shard := a / "results/shards/closure/a/layer0.parquet")
    t = t.set_column(t.column_names.index("P"), "P", pa.array([0.1, 0.25, 0.3]))
    pq.write_table(t.replace_schema_metadata(pq.read_metadata(shard).metadata), b / "results/shards/closure/a/layer0.parquet")
    assert cli(["diff", str(a), str(b)]) == 2
    assert "does not match its record" in capsys.readouterr().err


def test_not_a_run_directory_is_exit_2(tmp_path, capsys):
    assert cli(["diff", str(tmp_path), str(tmp_path)]) == 2
    assert "no results/tables" in capsys.readouterr().err


def test_relative_change():
    assert relative_change("2", "3") == 0.5 and relative_change("-2", "-3") == -0.5
    assert relative_change("0", "1") is None and relative_change("nan", "1") is None and relative_change("a", "b") is None


def _figure(root: Path, png: bytes, threshold: float) -> None:
    (root / "figures").mkdir(exist_ok=True)
    (root / "figures/f.png").write_bytes(png)
    (root / "figures/f.prov.json").write_text(json.dumps({"figure": "f", "params": {"tables": {"strong_threshold": threshold}}}))


def test_a_redrawn_figure_and_its_params(tmp_path, capsys):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    _figure(a, b"\x89PNG one", 0.9)
    _figure(b, b"\x89PNG one", 0.9)
    assert diff_runs(a, b)["figures"] == []
    _figure(b, b"\x89PNG two", 0.8)
    (f,) = diff_runs(a, b)["figures"]
    assert f == {"name": "f", "status": "differs", "files": ["f.png"], "params": {"tables.strong_threshold": [0.9, 0.8]}}
    assert cli(["diff", str(a), str(b), "--fail-on-change"]) == 1
    assert "f: differs (f.png redrawn; tables.strong_threshold: 0.9 -> 0.8)" in capsys.readouterr().out


def test_rev_compares_with_the_tables_git_tracks_at_a_revision(tmp_path, capsys):
    import subprocess

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path / "repo"), *a], check=True, capture_output=True)

    run = _run(tmp_path / "repo" / "paper")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    assert cli(["diff", "--rev", "HEAD", str(run), "--fail-on-change"]) == 0
    assert "identical" in capsys.readouterr().out
    (run / "results/tables/u.csv").write_text("model,D\na,385\n")
    assert cli(["diff", "--rev", "HEAD", str(run), "--fail-on-change"]) == 1
    assert "model=a  D: 384 -> 385" in capsys.readouterr().out
    # a revision that tracks no results (this repository's own case) is a clear error
    git("-c", "user.name=t", "-c", "user.email=t@t", "rm", "-rq", "--cached", "paper/results")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "untrack")
    assert cli(["diff", "--rev", "HEAD", str(run)]) == 2
    assert "tracks no results/tables" in capsys.readouterr().err
