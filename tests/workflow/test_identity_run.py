"""Every file of a finished tiny run bound to what it is, and ``headgeom verify`` over the whole run:

* sound shards copied to other shards' paths (another layer, another model, another part, another
  null block) are named by ``verify`` and by the next ``snakemake``, which rebuilds each; every
  table ends identical to the clean run;
* six different damages (missing files among them) are six lines of ``verify``;
* an edited sensitivity row, and a table CSV edited with its sidecar deleted, are rebuilt;
* a tensor store damaged with its old time stamp is fetched again before any job reads it, and no
  job fails (so Snakemake deletes no intact output)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from headgeom.io.shards import shard_problems
from tinyrun import copy_run, snakemake, tiny_run
from synth import write_llama

pytestmark = pytest.mark.slow

MISPLACED = {  # destination <- a sound shard of another place
    "results/shards/pk_within/tiny/layer1.parquet": "results/shards/pk_within/tiny/layer0.parquet",  # another layer
    "results/shards/pk_cross/tiny2/part0.parquet": "results/shards/pk_cross/tiny/part0.parquet",  # another model
    "results/shards/pk_cross/tiny2/part2.parquet": "results/shards/pk_cross/tiny2/part1.parquet",  # another part
    "results/shards/pk_null_within/tiny/layer0/block1.parquet":  # another null block
        "results/shards/pk_null_within/tiny/layer0/block0.parquet",
}


def headgeom(w: Path, *args):
    return subprocess.run([sys.executable, "-m", "headgeom.cli", *args, "-d", str(w), "--configfile",
                           str(w / "cfg.yaml")], capture_output=True, text=True)


def tables(w: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((w / "results/tables").glob("*.csv"))}


@pytest.fixture(scope="module")
def run(tmp_path_factory, snakemake_bin, root):
    return tiny_run(tmp_path_factory, snakemake_bin, root)


@pytest.fixture(scope="module")
def two_models(run, tmp_path_factory, snakemake_bin, root):
    """The tiny run with a second model (3 layers: three pk_cross parts) and two null blocks per
    layer: every kind of place a shard can be at has a neighbour."""
    w = copy_run(run, tmp_path_factory.mktemp("identity") / "w")
    write_llama(w / "ckpt2", n_layers=3, seed=1, closed=((1, 1, 1.2),))
    cfg = yaml.safe_load((w / "cfg.yaml").read_text())
    cfg["models"]["tiny2"] = {"source": "local", "path": str(w / "ckpt2")}
    cfg["active_models"] = ["tiny", "tiny2"]
    cfg["pk"]["nulls"].update(samples_per_job=1, cross_samples_per_job=1)
    cfg["fanout"] = {"max_job_minutes": 1e-6}  # one layer pair per pk_cross part
    (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(snakemake_bin, root, w)
    for dst, src in MISPLACED.items():
        assert (w / dst).is_file() and (w / src).is_file(), (dst, src)
    v = headgeom(w, "verify")
    assert v.returncode == 0, v.stdout + v.stderr
    return w


def test_misplaced_shards_are_named_and_rebuilt(two_models, tmp_path, snakemake_bin, root):
    w = copy_run(two_models, tmp_path / "w")
    for dst, src in MISPLACED.items():
        shutil.copy2(w / src, w / dst)  # a careless cp: a sound shard, a new time stamp
    v = headgeom(w, "verify")
    assert v.returncode == 1, v.stdout + v.stderr
    lines = [ln for ln in v.stderr.splitlines() if ln.startswith("damaged: ")]
    assert sorted(ln.split(":")[1].strip() for ln in lines) == sorted(MISPLACED), v.stderr
    for dst, src in MISPLACED.items():
        line = next(ln for ln in lines if f" {dst}:" in ln)
        assert "a sound shard at another shard's path" in line and "rebuild: snakemake -c2 " + dst in line, line
    assert "4 problems" in v.stdout, v.stdout
    r = snakemake(snakemake_bin, root, w)
    out = r.stdout + r.stderr
    for dst in MISPLACED:
        line = next((ln for ln in out.splitlines() if ln.startswith(f"headgeom: {dst} is damaged (it is the shard of")),
                    "")
        assert "its job reruns" in line, out[-4000:]
        assert not shard_problems(w / dst)
    assert tables(w) == tables(two_models)
    assert headgeom(w, "verify").returncode == 0


def test_a_table_target_rebuilds_the_misplaced_shards_it_reads(two_models, tmp_path, snakemake_bin, root):
    """The snakemake of one table whose shards were swapped (another model's cross-layer shard)."""
    w = copy_run(two_models, tmp_path / "w")
    dst = "results/shards/pk_cross/tiny2/part0.parquet"
    shutil.copy2(w / MISPLACED[dst], w / dst)
    target = next(p for p in sorted((w / "results/tables").glob("*.prov.json"))
                  if dst in p.read_text()).name.removesuffix(".prov.json")
    r = snakemake(snakemake_bin, root, w, f"results/tables/{target}.csv")
    assert f"headgeom: {dst} is damaged (it is the shard of pk_cross/tiny/part0" in r.stderr, r.stderr[-3000:]
    assert not shard_problems(w / dst)
    assert (w / f"results/tables/{target}.csv").read_text() == (two_models / f"results/tables/{target}.csv").read_text()


SIX = ("results/shards/paper1_heads/tiny/layer0.parquet",  # deleted shard
       "results/tables/p1_table2_strong_tail.prov.json",  # deleted table sidecar
       "results/sensitivity/{alt}/row.json",  # edited sensitivity row
       "results/shards/pk_within/tiny/layer1.parquet",  # another layer's shard in its place
       "results/tensors/tiny",  # a flipped byte in the tensor store
       "figures/{fig}.prov.json")  # a figure whose PNG is deleted


def flip(path: Path, at: float = 0.5) -> None:
    """Flip one byte, keeping the size and the time stamps."""
    st = path.stat()
    b = bytearray(path.read_bytes())
    b[int(len(b) * at)] ^= 0x10
    path.write_bytes(bytes(b))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_six_damages_are_six_lines_and_all_rebuilt(run, tmp_path, snakemake_bin, root):
    w = copy_run(run, tmp_path / "w")
    row = sorted((w / "results/sensitivity").glob("*/row.json"))[0]
    fig = sorted((w / "figures").glob("*.png"))[0]
    (w / SIX[0]).unlink()
    (w / SIX[1]).unlink()
    row.write_text(_edit_changed(row.read_text()))
    shutil.copy2(w / "results/shards/pk_within/tiny/layer0.parquet", w / SIX[3])
    tensors = w / "results/tensors/tiny/tensors.safetensors"
    flip(tensors, 0.9)
    fig.unlink()
    v = headgeom(w, "verify")
    assert v.returncode == 1
    lines = [ln for ln in v.stderr.splitlines() if ln.startswith(("damaged: ", "missing: "))]
    expect = [SIX[0], SIX[1], str(row.relative_to(w)), SIX[3], SIX[4], f"figures/{fig.stem}.prov.json"]
    assert sorted(ln.split(": ")[1] for ln in lines) == sorted(expect), v.stderr
    assert "6 problems" in v.stdout, v.stdout
    assert all("; rebuild: " in ln for ln in lines), lines
    # The store's refetch reruns every job downstream of it (a whole run); that rebuild has its own test
    # (test_a_damaged_tensor_store_...), so the store is mended here and the other five are rebuilt.
    shutil.copy2(run / "results/tensors/tiny/tensors.safetensors", tensors)
    r = snakemake(snakemake_bin, root, w)
    out = r.stdout + r.stderr
    for p in (SIX[0], SIX[1], str(row.relative_to(w)), SIX[3], f"figures/{fig.stem}.prov.json"):
        assert any(ln.startswith(f"headgeom: {p} is ") for ln in out.splitlines()), (p, out[-4000:])
    assert tables(w) == tables(run)
    v = headgeom(w, "verify")
    assert v.returncode == 0, v.stdout + v.stderr


def _edit_changed(text: str) -> str:
    """A hand edit of a row: its ``changed`` count set to 5."""
    import json

    obj = json.loads(text)
    obj["row"]["changed"] = 5
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def test_an_edited_csv_without_its_sidecar_is_rebuilt(run, tmp_path, snakemake_bin, root):
    w = copy_run(run, tmp_path / "w")
    csv = w / "results/tables/p1_table2_strong_tail.csv"
    clean = csv.read_text()
    lines = clean.splitlines()
    lines[1] = lines[1].replace(",", ",9", 1)
    csv.write_text("\n".join(lines) + "\n")
    (w / "results/tables/p1_table2_strong_tail.prov.json").unlink()
    assert headgeom(w, "verify").returncode == 1
    r = snakemake(snakemake_bin, root, w, "results/tables/p1_table2_strong_tail.csv")
    assert "headgeom: results/tables/p1_table2_strong_tail.prov.json is missing: its job reruns" in r.stderr, \
        r.stderr[-3000:]
    assert csv.read_text() == clean


def test_an_edited_sensitivity_row_is_refused_and_rebuilt(run, tmp_path, snakemake_bin, root):
    from headgeom.core.errors import DamagedFileError
    from headgeom.publish.choice_sensitivity import aggregate_job

    w = copy_run(run, tmp_path / "w")
    row = sorted((w / "results/sensitivity").glob("*/row.json"))[0]
    clean = row.read_text()
    row.write_text(_edit_changed(clean))
    with pytest.raises(DamagedFileError, match="does not match its record"):
        aggregate_job(root / "config/claims.yaml", ["tiny"], [row.parent.name], [row], {})
    r = snakemake(snakemake_bin, root, w, "results/tables/choice_sensitivity.csv")
    assert f"headgeom: {row.relative_to(w)} is damaged" in r.stderr, r.stderr[-3000:]
    assert tables(w) == tables(run)


def test_a_damaged_tensor_store_with_an_old_time_stamp_is_fetched_before_any_job(run, tmp_path, snakemake_bin, root):
    w = copy_run(run, tmp_path / "w")
    flip(w / "results/tensors/tiny/tensors.safetensors", 0.7)
    r = snakemake(snakemake_bin, root, w)
    out = r.stdout + r.stderr
    assert "headgeom: results/tensors/tiny is damaged" in out, out[-3000:]
    assert "Error in rule" not in out and "Removing output files of failed job" not in out, out[-4000:]
    jobs = [ln.split(" ", 1)[1].rstrip(":") for ln in out.splitlines()
            if ln.startswith(("rule ", "localrule ", "checkpoint ", "localcheckpoint "))]
    assert jobs and jobs[0] == "fetch", jobs[:5]
    shards = sorted(p.relative_to(run) for p in (run / "results/shards").rglob("*.parquet"))
    assert sorted(p.relative_to(w) for p in (w / "results/shards").rglob("*.parquet")) == shards
    assert not [p for p in shards if shard_problems(w / p)]
    assert tables(w) == tables(run)
    assert headgeom(w, "verify").returncode == 0
