"""One complete pipeline run on a tiny synthetic checkpoint, shared by test_audit, test_claims
and test_rebuild (cached for the session), plus helpers to run Snakemake on it and to parse a
dry run's job list.

The run uses every rule of the workflow with small settings (2 layers, GQA 4 query / 2 KV heads,
two planted closed heads, 2 null samples per block) and takes about a minute on 2 cores. Tests
that change files work on a copy (``copy_run``)."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from dryrun import dry_run_jobs
from synth import write_llama

CFG = {
    "active_models": ["tiny"],
    "pk": {
        "kinds": ["O", "Q", "K", "V"], "cross_kinds": ["Q", "K", "V"], "self_permutations": 200,
        "nulls": {"types": ["rotation", "reassign"], "within_samples": 2, "cross_samples": 2, "samples_per_job": 2,
                  "cross_samples_per_job": 2},
    },
    "paper1": {"capacity": {"restarts": 2, "iters": 10, "sample_per_layer": 2}, "bootstrap": 100},
}

_CACHE: dict[str, Path] = {}


def snakemake(snakemake_bin, root, workdir, *args, configfiles=("cfg.yaml",), ok=True, timeout=600):
    """Run Snakemake on the repo's Snakefile in ``workdir`` (targets and flags first:
    --configfile takes every word after it)."""
    workdir = Path(workdir)
    cmd = [snakemake_bin, *args, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2",
           "--configfile", *[str(workdir / c) for c in configfiles]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def tiny_run(tmp_path_factory, snakemake_bin, root) -> Path:
    """The shared run (built once per session). Treat it as read-only."""
    if "run" not in _CACHE:
        w = tmp_path_factory.mktemp("tinyrun")
        # closed heads planted at layer 0 head 0 (alpha 1.5) and layer 1 head 3 (alpha -0.8)
        write_llama(w / "ckpt", closed=((0, 0, 1.5), (1, 3, -0.8)), shards=2)
        cfg = {"models": {"tiny": {"source": "local", "path": str(w / "ckpt")}}, **CFG}
        (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        snakemake(snakemake_bin, root, w)
        _CACHE["run"] = w
    return _CACHE["run"]


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of a run that Snakemake sees as up to date (mtimes and metadata kept)."""
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("report*.html"))
    return dst


def merge(base: dict, edit: dict) -> dict:
    out = dict(base)
    for k, v in edit.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def dry_runs(snakemake_bin, root, workdir: Path, edits: dict[str, dict], targets=()) -> dict[str, list]:
    """Dry-run the workflow under each config edit (merged over the run's cfg.yaml), in parallel.
    Nothing in ``workdir`` changes: each edit gets its own config file beside cfg.yaml."""
    base = yaml.safe_load((workdir / "cfg.yaml").read_text())

    def one(item):
        name, edit = item
        cfg = workdir / f"cfg_{name}.yaml"
        cfg.write_text(yaml.safe_dump(merge(base, edit)))
        r = snakemake(snakemake_bin, root, workdir, *targets, "-n", configfiles=(cfg.name,))
        return name, dry_run_jobs(r.stdout + r.stderr), r.stdout + r.stderr

    with ThreadPoolExecutor(max_workers=4) as ex:
        res = list(ex.map(one, edits.items()))
    return {name: (jobs, text) for name, jobs, text in res}


CHOICE = ("choice_sensitivity", "results/tables/choice_sensitivity.csv")


def sensitivity_jobs(cfg: dict, reruns: set, ledger_tables) -> set:
    """The choice-sensitivity jobs a dry run lists beside the jobs ``reruns`` ((rule, first
    output)) of a config ``cfg`` (the run's config file): an alternative's job when a table it reads reruns (the ledger's
    tables ``ledger_tables``, the tables it rebuilds) or one of its forward passes does (after the
    run's own forward pass of that model, corpus and windows); the aggregate when any of them does
    (workflow/rules/claims.smk)."""
    from headgeom.schedule.families import activation_models
    from headgeom.core.config import load_config
    from headgeom.targets import built_tables
    from headgeom.publish.choice_sensitivity import planned

    cfg = load_config(overrides=cfg)  # over config/config.yaml, as Snakemake reads it
    built = built_tables(cfg)
    tables = {t for r, o in reruns if r.startswith("table_") for t in [r[len("table_"):]]}
    out = set()
    for a in planned(cfg, built, activation_models(cfg)):
        fwd = set()
        for m, c, n, w in a.forwards:
            if ("activation_forward", f"results/activations/{m}/{c}/{n}x{w}") in reruns:
                fwd.add(("sensitivity_forward", f"results/sensitivity/{a.id}/results/activations/{m}/{c}/{n}x{w}"))
        if fwd or tables & ({t for t in ledger_tables if t in built} | set(a.tables)):
            out |= fwd | {("sensitivity_tables" if a.kind == "tables" else "sensitivity_shards",
                           f"results/sensitivity/{a.id}/row.json")}
    return out | {CHOICE} if out else out
