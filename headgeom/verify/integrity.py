"""The check of a whole run: every file a config's DAG expects (headgeom.verify.expected) against
its record, and what it is against what is asked for; one ``Problem`` per missing, damaged or
misplaced file, with the command that rebuilds it, and one per directory of shards of no known
family (a family renamed since the tree was written: stale; nothing reads it).

* shards (results/shards, and those of the choice sensitivity): ``headgeom.io.shards.shard_check``
  (the content record in each shard's footer; its identity: place, checkpoint, config digest);
* tables and figures: their sidecar (its own record and identity) and the files' sha256s it
  records (``headgeom.io.files.set_problems``);
* sensitivity rows: their record and alternative (``headgeom.publish.choice_sensitivity.row_problems``);
* tensor stores: ``headgeom.io.store.verify_store`` (size, header; the store's sha256 against its
  manifest when it is hashed);
* forward passes (results/activations): forward.json's record and identity, each layer file against
  the sha256 it records (``headgeom.jobs.activation.activation_problems``).

``headgeom verify`` checks everything (``run_problems``); the workflow's load check
(``to_rebuild``, called once as the Snakefile is read) checks the same set with the large inputs
(tensor stores, forward passes) hashed up to ``HASH_BUDGET`` bytes in all, and makes the run rebuild
each problem's file before any job reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headgeom import layout
from headgeom.io.shards import rebuild_command

# bytes of tensor stores and forward passes the load check hashes in full per run (beyond it: sizes
# and headers alone); headgeom verify hashes every byte
HASH_BUDGET = 2 << 30


@dataclass(frozen=True)
class Problem:
    path: str  # relative to the work directory
    what: str  # why, in a few words
    rebuild: str  # the command that rebuilds it
    force: str | None = None  # the target the load check makes the run rebuild (None: none)
    kind: str = ""  # "stale" / "unknown": a directory of shards of a renamed / of no known family, which
    #   nothing reads or rebuilds; "": a file, missing or damaged (``label``)

    def label(self) -> str:
        """missing, damaged, stale or unknown."""
        return self.kind or ("missing" if self.what == "missing" else "damaged")

    def line(self) -> str:
        return f"{self.path}: {self.what}; rebuild: {self.rebuild}"


def _shard_problems(workdir: Path, exp, threads: int) -> tuple[int, list[Problem]]:
    """Every shard under results/shards (and the choice sensitivity's) that is damaged or not the
    shard of its path, and every expected shard that is missing."""
    from concurrent.futures import ThreadPoolExecutor

    from headgeom.io.shards import rebuild_hint, shard_problems
    from headgeom.schedule.families import SHARD_FAMILIES

    roots = [workdir / layout.SHARDS_ROOT, *sorted((workdir / layout.SENSITIVITY_ROOT).glob(f"*/{layout.SHARDS_ROOT}"))]
    paths, unknown = [], {}  # shards of a known family; results/shards/<no known family> -> its shards
    for root in roots:
        for p in sorted(root.rglob("*.parquet")):
            if not p.name.startswith("."):
                fam = root / p.relative_to(root).parts[0]
                (paths.append(p) if fam.name in SHARD_FAMILIES else unknown.setdefault(fam, []).append(p))
    rels = [str(p.relative_to(workdir)) for p in paths]
    with ThreadPoolExecutor(max(1, threads)) as ex:
        found = list(ex.map(lambda i: shard_problems(paths[i], exp.shards.get(rels[i])), range(len(paths))))
    out = [_unknown_family(d.relative_to(workdir), len(ps)) for d, ps in unknown.items()]
    out += [Problem(rel, "; ".join(probs), *_shard_rebuild(rel)) for rel, probs in zip(rels, found) if probs]
    there = set(rels)
    out += [Problem(p, "missing", rebuild_hint(p), p) for p in exp.shards if p not in there]
    return len(paths), out


def _unknown_family(rel: Path, n: int) -> Problem:
    """A directory of shards under results/shards whose name is no shard family: a family renamed
    since an older headgeom wrote it (stale), or none this headgeom (with its plugins) knows. Nothing
    reads its shards; the remedy is to delete it (the load check names it and forces nothing)."""
    from headgeom.schedule.families import RENAMED_FAMILIES, SHARD_FAMILIES

    new = RENAMED_FAMILIES.get(rel.name)
    if new is not None:
        what = (f"{n} shard(s) of the family {rel.name!r}, since renamed {new!r} (written by an older "
                f"headgeom; nothing reads them; the run writes {rel.parent / new})")
    else:
        what = f"{n} shard(s) of no known shard family (known: {', '.join(SHARD_FAMILIES)}); nothing reads them"
    return Problem(str(rel), what, f"nothing; delete it: rm -r {rel}", kind="stale" if new else "unknown")


def _shard_rebuild(rel: str) -> tuple[str, str]:
    """(the command that rebuilds a shard, what the load check forces): its own job, or for a
    choice-sensitivity alternative's shard (an output of that alternative's job as a directory)
    the alternative's row."""
    from headgeom.io.shards import rebuild_hint

    parts = Path(rel).parts
    if rel.startswith(layout.SENSITIVITY_ROOT + "/") and len(parts) > 3:
        row = layout.sensitivity_row(parts[2])
        return rebuild_hint(row), row
    return rebuild_hint(rel), rel


def _store_problems(workdir: Path, exp, budget: list[int]) -> list[Problem]:
    import json

    from headgeom.io.store import verify_store

    out = []
    for m, d in exp.stores.items():
        manifest = f"{d}/manifest.json"
        try:
            size = int(json.loads((workdir / manifest).read_text()).get("store_size") or 0)
        except (OSError, ValueError, AttributeError, TypeError):
            size = 0
        full = budget[0] >= size
        budget[0] -= size if full else 0
        probs = verify_store(workdir / d, full=full)
        if probs:
            missing = not (workdir / manifest).exists()  # not fetched: a run fetches it anyway
            what = "missing" if missing else "; ".join(p.replace(str(workdir) + "/", "") for p in probs)
            out.append(Problem(d, what, f"snakemake -c2 --forcerun {manifest} (add your usual --configfile)",
                               None if missing else manifest))
    return out


def _forward_problems(workdir: Path, exp, budget: list[int]) -> list[Problem]:
    from headgeom.jobs.activation import activation_problems

    out = []
    for d in exp.forwards:
        if not (workdir / d).exists():
            out.append(Problem(d, "missing", f"snakemake -c2 {d} (add your usual --configfile)", None))
            continue
        size = sum(p.stat().st_size for p in (workdir / d).glob("*.safetensors"))
        full = budget[0] >= size
        budget[0] -= size if full else 0
        probs = activation_problems(workdir / d, hash_files=full)
        if probs:
            out.append(Problem(d, "; ".join(p.replace(str(workdir) + "/", "") for p in probs),
                               f"snakemake -c2 --force {d} (add your usual --configfile)", d))
    return out


def _row_problems(workdir: Path, exp) -> list[Problem]:
    from headgeom.publish.choice_sensitivity import row_problems

    out = []
    for p, alt in exp.rows.items():
        probs = row_problems(workdir / p, alt)
        if probs:
            out.append(Problem(p, "missing" if not (workdir / p).exists() else "; ".join(probs),
                               f"snakemake -c2 {p} (add your usual --configfile)", p))
    return out


def _output_problems(workdir: Path, exp) -> list[Problem]:
    """Every table and figure: its sidecar missing, not its own record or another output's, or a
    file it lists missing or changed."""
    from headgeom.io.files import set_problems

    out = []
    for kind, name, files in exp.outputs:
        main = files["csv" if kind == "table" else "png"]
        prov = workdir / files["prov"]
        probs = set_problems(prov)
        if probs:
            what = "missing" if not prov.exists() else "; ".join(probs)  # a missing sidecar: an unfinished set
            out.append(Problem(files["prov"], what, rebuild_command(_rule(kind, name), main), main))
    return out


def _rule(kind: str, name: str) -> str:
    """The rule that writes a table or figure (the claims rules' tables are their own rules)."""
    from headgeom.targets import CLAIMS_TABLES

    return name if name in CLAIMS_TABLES else f"{kind}_{name}"


def run_problems(config: dict, workdir: str | Path = ".", threads: int = 2, budget: int | None = None,
                 say=None) -> tuple[int, list[Problem]]:
    """(files checked, every problem of the run of ``config`` in ``workdir``): each expected file
    missing, damaged or not the file its path asks for, and each damaged file found beside them
    (shards). ``budget``: bytes of tensor stores and forward passes hashed in full (None: all)."""
    from headgeom.verify.expected import expected

    workdir = Path(workdir)
    exp = expected(config, workdir)
    left = [float("inf") if budget is None else budget]
    n_shards, problems = _shard_problems(workdir, exp, threads)
    problems = (_store_problems(workdir, exp, left) + _forward_problems(workdir, exp, left) + problems
                + _row_problems(workdir, exp) + _output_problems(workdir, exp))
    checked = n_shards + len(exp.stores) + len(exp.forwards) + len(exp.rows) + len(exp.outputs)
    return checked, problems


def to_rebuild(config: dict, workdir: str | Path = ".", say=print, threads: int = 2) -> list[str]:
    """The workflow's load check: the files a run must rebuild before anything reads them (paths
    relative to ``workdir``; one line each through ``say``): every problem of ``run_problems``
    with the large inputs hashed up to ``HASH_BUDGET``. Snakemake alone would rebuild none of them:
    a time stamp says nothing of a file's bytes or of what it is, and a missing input of an output
    that exists is taken as an intermediate file deleted on purpose. A missing file is rebuilt here
    only when something built from it exists (a shard or row that a sidecar lists; a sidecar whose
    table's or figure's other files exist); any other missing file the run builds as usual (a
    model just added to the config is not a list of missing shards). A directory of shards of no
    known family (one renamed since: families.RENAMED_FAMILIES) is named, not rebuilt. Nothing is moved
    or deleted here (a dry run changes nothing); the rebuild overwrites the damaged file."""
    _, problems = run_problems(config, workdir, threads, budget=HASH_BUDGET)
    listed = _listed(Path(workdir)) if any(p.what == "missing" for p in problems) else set()
    out = {}
    for p in problems:
        if p.kind:
            say(f"headgeom: {p.path} is {p.kind}: {p.what}; {p.rebuild}")
        if p.force is None or p.force in out or (p.what == "missing" and not _built_on(workdir, p, listed)):
            continue
        say(f"headgeom: {p.path} is {'missing' if p.what == 'missing' else f'damaged ({p.what})'}: its job reruns")
        out[p.force] = None
    return list(out)


def _listed(workdir: Path) -> set[str]:
    """Every input path the tables' and figures' sidecars record."""
    import json

    out = set()
    for prov in [*(workdir / layout.TABLES_DIR).glob("*.prov.json"), *(workdir / layout.FIGURES_DIR).glob("*.prov.json")]:
        try:
            inputs = json.loads(prov.read_text()).get("inputs") or []
        except (OSError, ValueError, AttributeError):
            continue
        out |= {r["path"] for r in inputs if isinstance(r, dict) and isinstance(r.get("path"), str)}
    return out


def _built_on(workdir, p: Problem, listed: set[str]) -> bool:
    """Whether anything of the run exists that is built from the missing file of ``p`` (a shard or
    a row: a sidecar lists it; a sidecar: its table's or figure's other files)."""
    if p.path.endswith(".prov.json"):
        stem = p.path.removesuffix(".prov.json")
        return any(Path(workdir, stem + ext).exists() for ext in (".csv", ".md", ".tex", ".png", ".pdf"))
    return p.path in listed
