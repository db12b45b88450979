"""Making a table and its shards again: the table's aggregation from its sidecar
(``Aggregation``), the table rebuilt from shards by the output registry (``rebuild_table``, also
used by the choice sensitivity), per-layer shards recomputed from the tensor store by their
family's job (``recompute_shards``), and a shard's recorded tensor hashes against the store's
manifest (``verify_tensors``)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from headgeom import layout
from headgeom.schedule.families import SHARD_FAMILIES, JOBS, run_job
from headgeom.outputs import TABLES
from headgeom.outputs.build import build_output
from headgeom.verify.audit.read import AuditError, inside, model_name, shard_family

@dataclass
class Aggregation:
    name: str
    params: dict
    models: list[str]
    inputs: list[dict]  # sidecar input records, in order
    groups: "OrderedDict[str, list[str]]" = field(default_factory=OrderedDict)  # family -> paths
    columns_read: dict | None = None  # family -> the columns its builder read (sidecar; None: not recorded)

    @property
    def function(self) -> str:
        return f"headgeom.outputs.build.build_output('table', {self.name!r})"


def table_output(name: str):
    """The table's entry in the output registry."""
    if name not in TABLES:
        raise AuditError(f"table {name!r} is not made from shards by the output registry "
                         f"(known: {', '.join(TABLES)})")
    return TABLES[name]


def _unique(seq):
    return list(OrderedDict.fromkeys(seq))


def aggregation_from_sidecar(name: str, sidecar: dict, table_rows: list[dict]) -> Aggregation:
    table_output(name)
    inputs = sidecar.get("inputs", [])
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for rec in inputs:
        groups.setdefault(shard_family(rec["path"]), []).append(rec["path"])
    # The sidecar does not list the models the rule was given (params.models is left out of it);
    # they are the shards' models in input order (the rules list shards model by model), or,
    # for a table without shards, the table's model column.
    models = _unique(rec["provenance"]["model"] for rec in inputs if "model" in rec.get("provenance", {}))
    if not models:
        models = _unique(r["model"] for r in table_rows if r.get("model") not in (None, "") and not str(r["model"]).startswith("pooled"))
    models = [model_name(m, f"{name} sidecar") for m in models]
    return Aggregation(name, dict(sidecar.get("params", {})), models, inputs, groups, sidecar.get("columns_read"))


def rebuild_table(agg: Aggregation, workdir: Path, out_dir: Path, shard_root: Path | None = None, *,
                  roots: dict | None = None, groups: "OrderedDict[str, list[str]] | None" = None,
                  models: list[str] | None = None, params: dict | None = None) -> Path:
    """Rebuild the table of ``agg`` from shards into ``out_dir`` and return its CSV: the one way
    ``headgeom audit`` and the choice sensitivity make a table again. Shard paths (``groups``,
    default the sidecar's) are relative to ``roots[family]``, else ``shard_root`` (default the
    workdir); ``models`` and ``params`` default to the sidecar's."""
    groups = agg.groups if groups is None else groups
    models = agg.models if models is None else models
    params = dict(agg.params) if params is None else params
    shard_root, roots = Path(shard_root or workdir), roots or {}
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = {ext: str(out_dir / f"{agg.name}.{ext}") for ext in ("csv", "md", "tex")}
    outputs["prov"] = str(out_dir / f"{agg.name}.prov.json")
    manifests = [str(workdir / layout.manifest(m)) for m in models]
    inputs = {fam: [str(Path(roots.get(fam, shard_root)) / p) for p in groups.get(fam, [])]
              for fam in table_output(agg.name).families}
    build_output("table", agg.name, inputs, manifests, list(models), outputs, params)
    return Path(outputs["csv"])


# ------------------------------------------------------------------ recomputing shards


def activations_dir(model: str, prov: dict) -> str:
    """The forward pass's directory (relative to the run) an activation shard was computed from,
    as its provenance records it: results/activations/<model>/<corpus>/<n>x<w>."""
    act = prov.get("activations") or {}
    win = act.get("windows") or {}
    return layout.activations(model, act.get("corpus"), win.get("n_windows"), win.get("window"))


def recompute_shards(paths: list[str], provs: dict[str, dict], workdir: Path, out_root: Path, on_shard=None,
                     acts_root: Path | None = None, unchanged: tuple = ()) -> None:
    """Recompute per-layer shards from the tensor store into out_root/<same relative path>, each
    by its family's job in the registry (headgeom.schedule.families), with the params its
    provenance records; a job that writes several families writes all of them. An activation
    shard reads the forward pass's directory its provenance names under ``acts_root`` (default
    the workdir: the run's own forward passes). ``unchanged``: columns the caller knows the
    recomputation cannot change (its family's ``column_reads``), which a job that can take them
    from the run's own shard (workdir/<path>) takes instead of computing them again. ``on_shard``
    (optional) is called with each shard's path once it is recomputed (progress, the audit's list)."""
    from headgeom.jobs.activation import keep_reader_terms, reuse_columns

    reuse = {Path(out_root) / p: (Path(workdir) / p, tuple(unchanged)) for p in paths} if unchanged else {}
    with keep_reader_terms(), reuse_columns(reuse):  # a reader layer's terms built once for all its writer layers
        _recompute_each(paths, provs, workdir, out_root, on_shard, acts_root)


def _recompute_each(paths, provs, workdir: Path, out_root: Path, on_shard, acts_root) -> None:
    quiet = lambda *a, **k: None  # noqa: E731
    done: set[str] = set()
    for p in paths:
        if p in done:
            continue
        prov = provs[p]
        inside(out_root, p, "shard to recompute")  # a path that leaves out_root is refused, never written
        fam = SHARD_FAMILIES[shard_family(p)]
        job, model = JOBS[fam.job], model_name(prov.get("model"), p)
        params = dict(prov.get("params", {}))
        final = model_name(params.get("final_model", model), p)
        inputs = {"manifest": str(workdir / layout.manifest(model)),
                  "final_manifest": str(workdir / layout.manifest(final))}
        if job.activations:  # the forward pass's directory the shard was computed from (its provenance)
            inputs["acts"] = str(inside(Path(acts_root or workdir), activations_dir(model, prov),
                                        "activations of the shard"))
        outputs = {}
        for f in job.families:
            rel = p.replace(f"{layout.SHARDS_ROOT}/{fam.name}/", f"{layout.SHARDS_ROOT}/{f.name}/", 1)
            target = inside(out_root, rel, "shard to recompute")
            shard_family(str(target.relative_to(out_root)))
            target.parent.mkdir(parents=True, exist_ok=True)
            outputs[f.output] = str(target)
            done.add(rel)
        run_job(job.name, inputs, outputs, {"model": model, "layer": prov.get("layer")}, params, log=quiet)
        if on_shard:
            on_shard(p)


def verify_tensors(prov: dict, manifest: dict) -> list[tuple[str, str, str]]:
    """(tensor, sha256 recorded in the shard, status against the store manifest)."""
    rows = []
    recorded: dict[str, str] = {}
    # "tensors" maps tensor -> sha256, except in a shard that covers several writer layers
    # (a pk_cross fan-out part): there it is grouped by layer, {"0": {tensor: sha256}, ...},
    # as "tensors_readers" always is; a layer number is never a tensor name.
    for group in (prov.get("tensors"), prov.get("tensors_readers"), prov.get("final_tensors")):
        for k, v in (group or {}).items():
            if isinstance(v, dict):
                recorded.update(v)
            else:
                recorded[k] = v
    for k, sha in sorted(recorded.items()):
        entry = manifest.get("tensors", {}).get(k)
        if entry is None:
            status = "NOT IN MANIFEST"
        elif entry.get("sha256") == sha:
            status = "matches manifest"
        else:
            status = f"DIFFERS from manifest ({entry.get('sha256', '')[:16]}…)"
        rows.append((k, sha, status))
    return rows
