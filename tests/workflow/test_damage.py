"""Damaged shards of a finished run (a flipped bit, a truncated file, a deleted file): the next
``snakemake`` names each damaged one, sets it aside and rebuilds it, and every table ends as in
the undamaged run; a reader never uses a damaged shard (``headgeom audit``, a table build);
``headgeom verify`` lists every damaged and missing file; the rebuild line an audit prints works as printed."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from headgeom.core.errors import DamagedFileError
from headgeom.io.shards import read_shards, shard_problems
from headgeom.verify.audit import audit, render_full
from tinyrun import copy_run, snakemake, tiny_run

pytestmark = pytest.mark.slow

FLIP = "results/shards/paper1_heads/tiny/layer1.parquet"
TRUNCATE = "results/shards/pk_within/tiny/layer0.parquet"
DELETE = "results/shards/paper1_heads/tiny/layer0.parquet"


@pytest.fixture(scope="module")
def run(tmp_path_factory, snakemake_bin, root):
    return tiny_run(tmp_path_factory, snakemake_bin, root)


def flip_bit(path: Path, at: float = 0.3) -> None:
    """Flip one bit in the data pages (the first third of the file), the size unchanged."""
    b = bytearray(path.read_bytes())
    b[int(len(b) * at)] ^= 0x10
    path.write_bytes(bytes(b))


def damage(w: Path) -> None:
    flip_bit(w / FLIP)
    p = w / TRUNCATE
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    (w / DELETE).unlink()
    # a killed writer's temporary file beside the deleted shard
    (w / DELETE).with_name(f".{Path(DELETE).name}.tmp-killed").write_bytes(b"partial")


def tables(w: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((w / "results/tables").glob("*.csv"))}


def headgeom(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "headgeom.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_damaged_shards_named_rebuilt_and_tables_identical(run, tmp_path, snakemake_bin, root):
    w = copy_run(run, tmp_path / "w")
    damage(w)
    # headgeom verify lists both damaged files and the missing one
    v = headgeom("verify", "-d", str(w), "--configfile", str(w / "cfg.yaml"))
    assert v.returncode == 1, v.stdout + v.stderr
    assert f"damaged: {FLIP}:" in v.stderr and f"damaged: {TRUNCATE}:" in v.stderr, v.stderr
    assert f"missing: {DELETE}: missing; rebuild: snakemake -c2 {DELETE}" in v.stderr, v.stderr
    assert "does not match its record" in v.stderr and "no Parquet footer" in v.stderr
    assert "3 problems" in v.stdout, v.stdout
    r = snakemake(snakemake_bin, root, w)
    out = r.stdout + r.stderr
    for p, why in ((FLIP, "is damaged (its content does not match its record"),
                   (TRUNCATE, "is damaged (no Parquet footer"), (DELETE, "is missing: its job reruns")):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"headgeom: {p} ")), "")
        assert why in line and "its job reruns" in line, out[-3000:]
    for p in (FLIP, TRUNCATE, DELETE):
        assert not shard_problems(w / p)
    assert not list((w / DELETE).parent.glob(".*.tmp-*"))  # the killed job's temp file is gone
    assert tables(w) == tables(run)
    v = headgeom("verify", "-d", str(w), "--configfile", str(w / "cfg.yaml"))
    assert v.returncode == 0 and "all present and match their records" in v.stdout, v.stdout + v.stderr


def test_no_table_from_a_damaged_shard(run, tmp_path):
    w = copy_run(run, tmp_path / "w")
    flip_bit(w / FLIP)
    with pytest.raises(DamagedFileError, match=r"layer1\.parquet is damaged: its content does not match"):
        read_shards([w / FLIP])
    # the audit of a number over the damaged shard says so (not MATCH)
    res = audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "gT_med", tensors=False, find_rows=False)
    text = "\n".join(render_full(res))
    assert not res.ok, text
    assert any("layer1.parquet is damaged" in x for x in res.integrity), res.integrity
    assert "Verdict: DAMAGED" in text and "Verdict: MATCH" not in text
    cli = headgeom("audit", "-d", str(w), "p1_table2_strong_tail", "--row", "model=tiny", "--column", "gT_med",
                   "--no-tensors")
    assert cli.returncode != 0 and "Verdict: DAMAGED — " in cli.stdout and f"{FLIP} (damaged (" in cli.stdout, \
        cli.stdout


def test_rebuild_line_of_an_audit_works_as_printed(run, tmp_path, snakemake_bin, root):
    w = copy_run(run, tmp_path / "w")
    res = audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "gT_med", tensors=False,
                configfiles=[str(w / "cfg.yaml")])
    line = res.rule.rebuild
    assert line.startswith("snakemake -c2 results/tables/p1_table2_strong_tail.csv --forcerun"), line
    before = {p.name: p.stat().st_mtime_ns for p in (w / "results/tables").glob("*.csv")}
    cmd = shlex.split(line)
    r = subprocess.run([snakemake_bin, *cmd[1:], "-s", str(root / "Snakefile")], cwd=w, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    after = {p.name: p.stat().st_mtime_ns for p in (w / "results/tables").glob("*.csv")}
    changed = sorted(n for n in after if after[n] != before.get(n))
    assert changed == ["p1_table2_strong_tail.csv"], changed  # that table, not `all`


def test_sensitivity_rows_list_their_rules_inputs(run):
    """An alternative's row lists the tables its rule declares (Snakemake's own record of the
    job's inputs), whatever other tables existed when it ran: the same under any job order."""
    import base64
    import json

    rows = sorted((run / "results/sensitivity").glob("*/row.json"))
    assert rows
    for row in rows:
        rel = str(row.relative_to(run))
        meta = run / ".snakemake/metadata" / base64.urlsafe_b64encode(rel.encode()).decode().rstrip("=")
        if not meta.exists():
            meta = run / ".snakemake/metadata" / base64.urlsafe_b64encode(rel.encode()).decode()
        declared = sorted(p for p in json.loads(meta.read_text())["input"] if p.startswith("results/tables/"))
        assert declared
        assert [i["path"] for i in json.loads(row.read_text())["inputs"]] == declared, rel
