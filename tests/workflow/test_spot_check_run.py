"""A finished tiny run: a ``pk_null_cross`` shard rewritten consistently (its content record
recomputed, as a job writes one) passes ``headgeom verify``'s records and is found by ``verify
--recompute`` over a sample that holds it; and every entry of the shipped ledger, none of whose
models the run has, exits 2 from ``headgeom audit --claim`` with the claims table's words, in under
5 s each, never auditing a cell."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from headgeom.io.shards import shard_problems, write_shard
from headgeom.verify import audit as AUD
from headgeom.verify import spot_check as S
from headgeom.verify.audit import AuditError
from headgeom.verify.claim_audit import audit_claim
from tinyrun import copy_run, tiny_run

pytestmark = pytest.mark.slow

NULL_CROSS = "results/shards/pk_null_cross/tiny/block0/part0.parquet"


@pytest.fixture(scope="module")
def run(tmp_path_factory, snakemake_bin, root):
    return tiny_run(tmp_path_factory, snakemake_bin, root)


def headgeom(*args):
    return subprocess.run([sys.executable, "-m", "headgeom.cli", *args], capture_output=True, text=True, timeout=600)


def test_a_consistently_rewritten_null_shard_is_found_by_recomputation_only(run, tmp_path):
    w = copy_run(run, tmp_path / "w")
    t = pq.read_table(w / NULL_CROSS)
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}
    col = next(c for c in t.column_names if cols[c].dtype.kind == "f" and np.isfinite(cols[c]).any())
    v = cols[col].copy()
    i = int(np.flatnonzero(np.isfinite(v))[0])
    v[i] = v[i] * 0.5 + 1.0
    write_shard(w / NULL_CROSS, {**cols, col: v}, json.loads(t.schema.metadata[b"headgeom"]))
    assert shard_problems(w / NULL_CROSS) == []
    r = headgeom("verify", "-d", str(w), "--configfile", str(w / "cfg.yaml"))
    assert r.returncode == 0 and "all present and match their records" in r.stdout, r.stdout + r.stderr
    pop = S.population(w)
    assert NULL_CROSS in pop and len(pop) > 10
    seed = next(s for s in range(10_000) if NULL_CROSS in S.draw(pop, 2, s))
    r = headgeom("verify", "-d", str(w), "--recompute", "2", "--seed", str(seed), "--configfile", str(w / "cfg.yaml"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"recomputed: {NULL_CROSS}: differs: column {col!r}: 1 of {len(v)} values differ" in r.stderr, r.stderr
    assert f"2 of {len(pop)} shards recomputed from the tensors" in r.stdout and "1 differs, 1 match" in r.stdout
    assert f"probability 2/{len(pop)} = " in r.stdout
    # the clean run recomputes to its stored values, the same sample
    r = headgeom("verify", "-d", str(run), "--recompute", "2", "--seed", str(seed), "--configfile", str(run / "cfg.yaml"))
    assert r.returncode == 0 and "2 match" in r.stdout, r.stdout + r.stderr


def test_every_shipped_entry_exits_2_with_the_claims_tables_words(run, monkeypatch):
    with open(run / "results/tables/claims.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # the tiny run is none of the papers' models: every entry is not run or not computed, but for
    # those derived from the papers' settings, which agree and read no cell either
    assert len(rows) > 500 and {r["status"] for r in rows} <= {"not run", "not computed by the pipeline", "agrees"}
    assert all(r["note"].startswith("derived") for r in rows if r["status"] == "agrees")

    def no_audit(*a, **k):
        raise AssertionError("audited a cell of an entry the ledger says reads none")

    monkeypatch.setattr(AUD, "audit", no_audit)
    slowest = 0.0
    for r in rows:
        t0 = time.perf_counter()
        with pytest.raises(AuditError) as e:
            audit_claim(run, r["id"], out=lambda *a: None)
        slowest = max(slowest, time.perf_counter() - t0)
        words = "; ".join(x for x in (r["status"], r["note"]) if x)
        assert str(e.value) == f"{r['id']}: no cell of this run to audit ({words})"
    assert slowest < 5, slowest
    # the command, as a user runs it (one process each, start-up included), for the entry whose
    # row filter matches the run's pooled trajectory row
    t0 = time.perf_counter()
    p = headgeom("audit", "--claim", "p1.t3.ci.e_lo", "-d", str(run))
    assert p.returncode == 2 and time.perf_counter() - t0 < 5, p.stderr
    assert p.stderr.startswith("headgeom audit: p1.t3.ci.e_lo: no cell of this run to audit (not run"), p.stderr
    page = (run / "results/tables/claims.html").read_text()
    assert "headgeom audit --claim" not in page
