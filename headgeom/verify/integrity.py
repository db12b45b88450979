"""``headgeom verify``: every file of a results tree against its content record, one line per
damaged file with the command that rebuilds it.

* shards (results/shards, and those of the choice sensitivity): ``headgeom.io.shards.shard_problems``
  (the content record in each shard's footer);
* tables and figures: their files against the sha256s their provenance sidecar records
  (``headgeom.io.files.set_problems``);
* tensor stores: ``headgeom.io.store.verify_store`` (the store's sha256 against its manifest);
* forward passes (results/activations): each layer file against its forward.json sha256.
"""

from __future__ import annotations

from pathlib import Path

from headgeom import layout


def rebuild_command(rule: str, target: str | Path, configfiles=()) -> str:
    """The command that rebuilds ``target`` by rerunning ``rule`` even when Snakemake sees it as
    up to date: the target first (``--forcerun`` takes every word after it as a rule name)."""
    cmd = f"snakemake -c2 {target} --forcerun {rule}"
    return cmd + (" --configfile " + " ".join(configfiles) if configfiles else "")


def results_problems(workdir: str | Path = ".", threads: int = 2) -> tuple[int, list[str]]:
    """(files checked, one line per damaged file) of the results tree in ``workdir``."""
    from headgeom.io.files import set_problems
    from headgeom.io.shards import damaged_shards, rebuild_hint
    from headgeom.io.store import verify_store
    from headgeom.jobs.activation import FORWARD_SUMMARY, activation_problems

    workdir = Path(workdir)
    checked, lines = 0, []
    roots = [workdir / layout.SHARDS_ROOT, *sorted((workdir / layout.SENSITIVITY_ROOT).glob(f"*/{layout.SHARDS_ROOT}"))]
    for root in roots:
        checked += sum(1 for p in root.rglob("*.parquet") if not p.name.startswith("."))
        for p, probs in damaged_shards(root, threads):
            rel = p.relative_to(workdir)
            lines.append(f"{rel}: {'; '.join(probs)}; rebuild: {rebuild_hint(rel)}")
    for sidecars in (workdir / layout.TABLES_DIR, workdir / layout.FIGURES_DIR):
        for prov in sorted(sidecars.glob("*.prov.json")):
            checked += 1
            probs = set_problems(prov)
            if probs:
                name = prov.name.removesuffix(".prov.json")
                kind, ext = ("table", "csv") if sidecars.name == "tables" else ("figure", "png")
                lines.append(f"{prov.relative_to(workdir)}: {'; '.join(probs)}; rebuild: "
                             f"{rebuild_command(f'{kind}_{name}', (prov.parent / f'{name}.{ext}').relative_to(workdir))}")
    for manifest in sorted((workdir / layout.TENSORS_ROOT).glob("*/manifest.json")):
        checked += 1
        probs = verify_store(manifest.parent, full=True)
        if probs:
            lines.append(f"{manifest.parent.relative_to(workdir)}: {'; '.join(probs)}; rebuild: "
                         f"snakemake -c2 --forcerun {manifest.relative_to(workdir)}")
    for summ in sorted((workdir / "results" / "activations").rglob(FORWARD_SUMMARY)):
        checked += 1
        probs = activation_problems(summ.parent)
        if probs:
            rel = summ.parent.relative_to(workdir)
            lines.append(f"{'; '.join(probs)}; rebuild: snakemake -c2 --force {rel}")
    return checked, lines


def shards_to_rebuild(workdir: str | Path = ".", say=print, threads: int = 2) -> list[str]:
    """The shards a run must rebuild before anything reads them (paths relative to ``workdir``),
    one line each: every damaged shard under results/shards (``damaged_shards``) and every shard a
    table's or figure's sidecar lists that is missing. Snakemake alone would rebuild neither: a
    shard's time stamp says nothing of its bytes, and a missing input of an output that exists is
    taken as an intermediate file deleted on purpose. Nothing is moved or deleted here (a dry run
    changes nothing); the rebuild overwrites the damaged file."""
    import json

    from headgeom.io.shards import damaged_shards

    workdir = Path(workdir)
    out = {}
    for p, probs in damaged_shards(workdir / layout.SHARDS_ROOT, threads):
        rel = str(p.relative_to(workdir))
        say(f"headgeom: {rel} is damaged ({'; '.join(probs)}): its job reruns")
        out[rel] = None
    for sidecars in (workdir / layout.TABLES_DIR, workdir / layout.FIGURES_DIR):
        for prov in sorted(sidecars.glob("*.prov.json")):
            try:
                inputs = json.loads(prov.read_text()).get("inputs") or []
            except (OSError, ValueError, AttributeError):
                continue
            for rec in inputs if isinstance(inputs, list) else []:
                p = rec.get("path") if isinstance(rec, dict) else None
                if not isinstance(p, str) or not p.startswith(layout.SHARDS_ROOT + "/") or p in out:
                    continue
                if not (workdir / p).exists():
                    say(f"headgeom: {p} is missing (listed in {prov.relative_to(workdir)}): its job reruns")
                    out[p] = None
    return list(out)
