"""Outputs keep the user's umask (issue 11): atomic writes used mkstemp (0600) and renamed, so
every shard, table, figure, manifest and store was unreadable to collaborators."""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager

import numpy as np
import pytest

# One place for the imports of the code under test (the package layout may move).
from headgeom.outputs import formats as FIG
from headgeom.io import files as HIO
from headgeom.io.fetch import fetch_model
from headgeom.io.shards import write_shard
from headgeom.outputs.formats import Column, Table
from synth import write_llama


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mask,want", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_every_kind_of_output_respects_the_umask(tmp_path, mask, want):
    with umask(mask):
        assert HIO.current_umask() == mask
        HIO.write_json(tmp_path / "a.json", {"x": 1})
        HIO.write_text(tmp_path / "a.txt", "x")
        write_shard(tmp_path / "s.parquet", {"a": np.arange(3)}, {"job": "t"})
        t = Table("t", "cap", [Column("a", "A")], [{"a": 1}])
        outs = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "tex")} | {"prov": str(tmp_path / "t.prov.json")}
        t.write(outs, [], {})
        plt = FIG.pyplot()
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        fouts = {"png": str(tmp_path / "f.png"), "pdf": str(tmp_path / "f.pdf"), "prov": str(tmp_path / "f.prov.json")}
        FIG.save(fig, fouts, {"figure": "f"})
        plt.close(fig)
        write_llama(tmp_path / "ck", n_layers=1)
        fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda s: None)
    files = ["a.json", "a.txt", "s.parquet", *(f"t.{k}" for k in ("csv", "md", "tex", "prov.json")),
             "f.png", "f.pdf", "f.prov.json", "store/manifest.json", "store/tensors.safetensors"]
    got = {f: oct(mode(tmp_path / f)) for f in files}
    assert got == {f: oct(want) for f in files}
    assert not list(tmp_path.glob(".*tmp-*")) and not list((tmp_path / "store").glob(".*tmp-*"))


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    p = tmp_path / "x.txt"
    HIO.write_text(p, "old")
    with pytest.raises(RuntimeError):
        with HIO.atomic_path(p) as tmp:
            tmp.write_text("new")
            raise RuntimeError("killed")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["x.txt"]
