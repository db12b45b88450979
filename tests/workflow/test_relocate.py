"""A run directory that holds the workflow (the layout of a clone after `make run`) can be copied
elsewhere and stays up to date: no job input or provenance names an absolute path inside it, so a
dry run of the copy has nothing to do and its sidecars name the same relative files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tinyrun import copy_run, tiny_run
from dryrun import dry_run_jobs

pytestmark = pytest.mark.slow


def _as_clone(root: Path, run: Path, dst: Path) -> Path:
    """The tiny run with the workflow beside it (Snakefile, workflow/, config/, envs/ copied in)."""
    copy_run(run, dst)
    shutil.copy2(root / "Snakefile", dst / "Snakefile")
    for d in ("workflow", "config", "envs"):
        shutil.copytree(root / d, dst / d, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _snakemake(snakemake_bin, d: Path, *args):
    r = subprocess.run([snakemake_bin, *args, "-s", str(d / "Snakefile"), "-d", str(d), "-c2",
                        "--configfile", str(d / "cfg.yaml")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_a_copied_run_directory_has_nothing_to_rerun(tmp_path, tmp_path_factory, snakemake_bin, root):
    a = _as_clone(root, tiny_run(tmp_path_factory, snakemake_bin, root), tmp_path / "a")
    _snakemake(snakemake_bin, a)  # brings the clone's own ledger path up to date (claims and what reads it)
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)
    shutil.rmtree(a)  # nothing of the copy may point back into the original
    r = _snakemake(snakemake_bin, b, "-n")
    assert dry_run_jobs(r.stdout + r.stderr) == [], (r.stdout + r.stderr)[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr
    for prov in (b / "results" / "tables").glob("*.prov.json"):
        text = prov.read_text()
        assert str(a) not in text and str(b) not in text, prov.name
    ledger = json.loads((b / "results/tables/claims.prov.json").read_text())["ledger"]
    assert ledger["path"] == "config/claims.yaml"
