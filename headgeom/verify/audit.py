"""Audit one reported number: where it came from, and whether it can be made again.

``audit(workdir, table, row, column)`` reads the table's CSV and its provenance sidecar
(``results/tables/<table>.prov.json``) and reports

* the aggregation that made the table (its job function, params, models, code version),
  the Snakemake rule and a command line that rebuilds it;
* every input shard, whether its file still has the sha256 the sidecar recorded, and the
  shards (and rows) that feed the selected row;
* each contributing shard's provenance: job, code version, the config values it was run with,
  its seeds; the rule and command line that rebuild it;
* the tensors those shards were computed from: the store file, where the model came from
  (package + version, repo + revision, or local path, with file sha256s) and every tensor's
  sha256, checked against the store's manifest;

then recomputes the number twice and says whether each matches the table (equal, or within
1e-12 relative):

(a) from the shards: the table's aggregation job is run again on the listed shards, into a
    temporary directory, and the same cell is read back;
(b) from the tensors: the contributing per-layer shards are recomputed from the tensor store
    by their family's job (``headgeom.schedule.families``; every tensor read is checked against its
    manifest sha256), then aggregated the same way.

Works for every table of the output registry (``headgeom.outputs.TABLES``): the table is
rebuilt by ``rebuild_table`` (headgeom.outputs.build.build_output) from its sidecar's shards and
params; the choice sensitivity (headgeom.verify.sensitivity) rebuilds tables the same way."""

from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
import time
import warnings
from base64 import urlsafe_b64encode
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from headgeom import layout
from headgeom.core.provenance import code_version
from headgeom.io.checkpoint import contained
from headgeom.io.files import set_problems, sha256_file
from headgeom.io.shards import shard_check
from headgeom.schedule.families import SHARD_FAMILIES, JOBS, run_job
from headgeom.schedule.families import family_of as registry_family_of
from headgeom.outputs import TABLES
from headgeom.outputs.build import build_output, prepare, traced

RTOL = 1e-12

class AuditError(Exception):
    """The number cannot be audited as asked (no such table, row or column, no sidecar)."""


def inside(root: Path, rel, what: str) -> Path:
    """``root / rel`` for a path from a sidecar that stays inside ``root``; AuditError if not."""

    return contained(root, rel, what, err=AuditError)


def model_name(m, where: str) -> str:
    """A model name from a provenance record: one path component (it names a store directory)."""
    if not isinstance(m, str) or not m or m in (".", "..") or "/" in m or "\\" in m or "\0" in m:
        raise AuditError(f"{where}: model name {m!r} is not a plain name (it would leave results/tensors/)")
    return m


def load_sidecar(prov_path: Path, workdir: Path) -> dict:
    """A table's provenance sidecar, checked: a JSON object whose ``inputs`` are records with a
    shard ``path`` under results/shards/ inside ``workdir`` (a path that leaves it is refused,
    never read or written), and whose recorded output sha256s (``outputs``) match the files
    beside it: a table whose files are not the set its sidecar describes is incomplete."""
    try:
        sidecar = json.loads(prov_path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise AuditError(f"{prov_path} is not a readable provenance sidecar ({type(e).__name__}: {e})") from e
    if not isinstance(sidecar, dict):
        raise AuditError(f"{prov_path}: a provenance sidecar must be a JSON object")
    inputs = sidecar.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(r, dict) and isinstance(r.get("path"), str) for r in inputs):
        raise AuditError(f"{prov_path}: 'inputs' must be a list of records with a 'path'")
    for rec in inputs:
        rel = inside(workdir, rec["path"], f"{prov_path.name}: input").relative_to(workdir)
        shard_family(str(rel))
        if not isinstance(rec.get("provenance", {}), dict):
            raise AuditError(f"{prov_path}: input {rec['path']}: 'provenance' must be an object")

    problems = set_problems(prov_path, sidecar)
    if problems:
        raise AuditError(f"{prov_path.name}: the table's files are not one complete set (interrupted write?): "
                         + "; ".join(problems) + ". Rebuild the table.")
    return sidecar


# ------------------------------------------------------------------ reading tables


def table_paths(workdir: Path, table: str) -> tuple[str, Path, Path]:
    """TABLE may be a name (p1_table2_strong_tail) or a path to its CSV; returns (name, csv, sidecar)."""
    p = Path(table)
    if p.suffix == ".csv" or "/" in table:
        csv_path = p if p.is_absolute() else workdir / p
        name = csv_path.name.removesuffix(".csv")
    else:
        name = table
        csv_path = workdir / layout.table_files(name)["csv"]
    prov = csv_path.with_name(f"{name}.prov.json")
    if not csv_path.exists():
        known = sorted(x.stem for x in (workdir / layout.TABLES_DIR).glob("*.csv"))
        raise AuditError(f"no table {csv_path} (tables here: {', '.join(known) or 'none'})")
    if not prov.exists():
        raise AuditError(f"{csv_path} has no provenance sidecar {prov.name}")
    return name, csv_path, prov


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


def parse_row_filters(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise AuditError(f"--row takes KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _cell_eq(cell: str, want: str) -> bool:
    if cell == want:
        return True
    try:
        return float(cell) == float(want)
    except ValueError:
        return False


def select_row(columns: list[str], rows: list[dict], filters: dict[str, str], where: str = "") -> int:
    for k in filters:
        if k not in columns:
            raise AuditError(f"{where}: no column {k!r} to select rows by (columns: {', '.join(columns)})")
    if not rows:
        raise AuditError(f"{where}: the table has no rows (empty), so there is no number to audit")
    hits = [i for i, r in enumerate(rows) if all(_cell_eq(r[k], v) for k, v in filters.items())]
    if len(hits) != 1:
        show = "\n".join("  " + ", ".join(f"{k}={r[k]}" for k in columns[:3]) for r in rows[:20])
        what = "no row" if not hits else f"{len(hits)} rows"
        raise AuditError(f"{where}: {what} with {filters}; add --row KEY=VALUE until one row is left. Rows:\n{show}")
    return hits[0]


NAN_BOTH = "NaN in the table and NaN recomputed: an undefined value, reproduced as undefined (no number compared)"


def _verdict(ok: bool, how: str) -> str:
    """The word printed for one comparison: NaN against NaN is said as such, never MATCH."""
    if ok and how == NAN_BOTH:
        return "NaN = NaN"
    return "MATCH" if ok else "MISMATCH"


def compare(table_value: str, recomputed: str) -> tuple[bool, str]:
    """(match, how): equal strings, or numbers within RTOL relative (inf = inf). NaN against
    NaN is (True, NAN_BOTH), which the audit reports as such, not as a match of numbers."""
    if table_value.strip().lower() in ("nan", "-nan") and recomputed.strip().lower() in ("nan", "-nan"):
        return True, NAN_BOTH
    if table_value == recomputed:
        return True, "exact"
    try:
        a, b = float(table_value), float(recomputed)
    except ValueError:
        return False, f"differs: table {table_value!r}, recomputed {recomputed!r}"
    if math.isnan(a) and math.isnan(b):
        return True, NAN_BOTH
    if a == b:
        return True, "exact"
    if math.isfinite(a) and math.isfinite(b):
        rel = abs(a - b) / max(abs(a), abs(b))
        if rel <= RTOL:
            return True, f"within {RTOL:g} relative ({rel:.1e})"
        return False, f"differs: table {table_value}, recomputed {recomputed} (relative difference {rel:.3e})"
    return False, f"differs: table {table_value}, recomputed {recomputed}"


# ------------------------------------------------------------------ snakemake metadata


def rule_of(workdir: Path, path: str) -> str | None:
    """The rule Snakemake recorded for an output (.snakemake/metadata), if any."""
    b64 = urlsafe_b64encode(path.encode()).decode()
    parts = [b64[i: i + 254] for i in range(0, len(b64), 254)]
    rec = workdir / ".snakemake" / "metadata" / Path(*(["@" + s for s in parts[:-1]] + [parts[-1]]))
    try:
        return json.loads(rec.read_text()).get("rule")
    except (OSError, ValueError):
        return None


def table_rule(workdir: Path, name: str, csv_rel: str) -> str:
    return rule_of(workdir, csv_rel) or f"table_{name}"


def shard_family(path: str) -> str:
    """The name of a path's shard family (headgeom.schedule.families.family_of), as an AuditError
    when no family writes it."""
    try:
        return registry_family_of(path).name
    except KeyError as e:
        raise AuditError(str(e.args[0])) from None


# ------------------------------------------------------------------ re-aggregation


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


def recompute_shards(paths: list[str], provs: dict[str, dict], workdir: Path, out_root: Path, log=print,
                     acts_root: Path | None = None, unchanged: tuple = ()) -> None:
    """Recompute per-layer shards from the tensor store into out_root/<same relative path>, each
    by its family's job in the registry (headgeom.schedule.families), with the params its
    provenance records; a job that writes several families writes all of them. An activation
    shard reads the forward pass's directory its provenance names under ``acts_root`` (default
    the workdir: the run's own forward passes). ``unchanged``: columns the caller knows the
    recomputation cannot change (its family's ``column_reads``), which a job that can take them
    from the run's own shard (workdir/<path>) takes instead of computing them again."""
    from headgeom.jobs.activation import keep_reader_terms, reuse_columns

    reuse = {Path(out_root) / p: (Path(workdir) / p, tuple(unchanged)) for p in paths} if unchanged else {}
    with keep_reader_terms(), reuse_columns(reuse):  # a reader layer's terms built once for all its writer layers
        _recompute_each(paths, provs, workdir, out_root, log, acts_root)


def _recompute_each(paths, provs, workdir: Path, out_root: Path, log, acts_root) -> None:
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
        log(f"    recomputed {p}")


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


# ------------------------------------------------------------------ the audit


def _fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(params.items())) or "(none)"


def _fmt_code(code: dict) -> str:
    s = f"headgeom {code.get('headgeom', '?')}, source sha256 {code.get('source_sha256', '?')[:16]}…"
    if code.get("git_commit"):
        s += f", git {code['git_commit'][:12]}{' (dirty)' if code.get('git_dirty') else ''}"
    return s


def _fmt_source(src: dict) -> str:
    s = src.get("source", {})
    t = s.get("type")
    if t == "pypi" or s.get("package"):
        return f"package {s.get('package')} {s.get('version', '')}".strip()
    if t == "hf" or s.get("repo_id"):
        return f"hub {s.get('repo_id')} @ {s.get('revision') or s.get('commit') or '?'}"
    if t == "local":
        return f"local {s.get('path')}"
    return json.dumps(s, sort_keys=True)


def _cmd(rule: str, target: str, configfiles: list[str]) -> str:
    from headgeom.verify.integrity import rebuild_command

    return rebuild_command(rule, target, configfiles)


VIEWS = ("short", "full", "none")


def audit(workdir, table: str, row: list[str] | dict, column: str, *, tensors: bool = True,
          configfiles: list[str] = (), out=print, tmpdir=None, max_rows: int = 5, view: str = "full") -> dict:
    """Explain and recompute one cell. Returns {'value', 'shards': (ok, how, value), 'tensors': (ok, how, value)
    | None, 'integrity': [problems], 'ok', 'nan', 'report'}; ``ok`` is True when all checks pass, ``report``
    is the audit as one JSON-ready object (``report_json``).

    ``view`` says what ``out`` is given: "full", the whole trace line by line as it is made (every shard's
    provenance, every tensor hash); "short", the one-screen summary (``render_short``) at the end;
    "none", nothing."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, not {view!r}")
    say = out if view == "full" else (lambda *a, **k: None)
    workdir = Path(workdir).resolve()
    name, csv_path, prov_path = table_paths(workdir, table)
    filters = parse_row_filters(row) if isinstance(row, list) else dict(row)
    columns, rows = read_csv(csv_path)
    if not rows:
        raise AuditError(f"{name}: {csv_path.name} has no rows (an empty table): there is no number to audit")
    if column not in columns:
        raise AuditError(f"{name}: no column {column!r} (columns: {', '.join(columns)})")
    i = select_row(columns, rows, filters, where=name)
    value = rows[i][column]
    sidecar = load_sidecar(prov_path, workdir)
    agg = aggregation_from_sidecar(name, sidecar, rows)
    csv_rel = str(csv_path.relative_to(workdir)) if csv_path.is_relative_to(workdir) else str(csv_path)
    rule = table_rule(workdir, name, csv_rel)
    integrity: list[str] = []
    configfiles = list(configfiles)
    shard_checks: list[dict] = []  # one per listed shard: path, feeds, status
    tensor_checks: list[dict] = []  # one per (model, tensor): status, shards that record it
    store_checks: list[dict] = []  # one per tensor store

    say(f"Audit of {csv_rel}, row {', '.join(f'{k}={v}' for k, v in filters.items())}, column {column}")
    say(f"  value in the table: {value}")
    say("")
    say("Aggregation")
    say(f"  function   {agg.function}   (sidecar: {sidecar.get('aggregation')})")
    say(f"  params     {_fmt_params(agg.params)}")
    say(f"  models     {', '.join(agg.models) or '(none)'}")
    say(f"  code       {_fmt_code(sidecar.get('code', {}))}")
    say(f"  rule       {rule}")
    say(f"  rebuild    {_cmd(rule, csv_rel, configfiles)}")
    say("")

    # which shards feed this row: those of the row's model when the table is per model
    row_model = rows[i].get("model")
    provs = {rec["path"]: rec.get("provenance", {}) for rec in agg.inputs}
    shard_models = {p.get("model") for p in provs.values()}
    per_model = bool(row_model and row_model in shard_models)
    if per_model:
        contributing = [rec["path"] for rec in agg.inputs if rec.get("provenance", {}).get("model") == row_model]
        sub_models = [row_model]
        why = f"model = {row_model}"
    else:
        contributing = [rec["path"] for rec in agg.inputs]
        sub_models = list(agg.models)
        why = "all listed shards" if agg.inputs else "no shards (from the manifests alone)"

    feeding = set(contributing)
    say(f"Shards ({len(agg.inputs)} listed in the sidecar; {len(contributing)} feed this row: {why})")
    for rec in agg.inputs:
        p = rec["path"]
        f = inside(workdir, p, f"{prov_path.name}: input")
        check = {"path": p, "feeds": p in feeding, "status": "ok"}
        shard_checks.append(check)
        if not f.exists():
            state = "MISSING"
            integrity.append(f"{p} is missing")
            check["status"] = "missing"
        else:
            damage, sha = shard_check(f)
            if damage:  # the shard against its own record: a sidecar may have recorded a damaged shard
                state = f"DAMAGED: {'; '.join(damage)}"
                integrity.append(f"{p} is damaged: {'; '.join(damage)}")
                check["status"] = f"damaged ({'; '.join(damage)})"
            elif sha == rec.get("sha256"):
                state = "sha256 matches sidecar"
            else:
                state = f"sha256 DIFFERS from sidecar (file {sha[:16]}…, sidecar {rec.get('sha256', '')[:16]}…)"
                integrity.append(f"{p}: file sha256 differs from the sidecar's")
                check["status"] = "sha256 differs from the sidecar"
        if p not in feeding:
            continue
        pv = rec.get("provenance", {})
        say(f"  {p}")
        say(f"    rows {rec.get('rows')}, {state}")
        if f.exists() and max_rows:
            try:
                t = pq.read_table(f)
                keys = [c for c in TRACE_KEYS if c in t.column_names]
                if column in t.column_names and column not in keys:
                    keys.append(column)
                show = t.select(keys).slice(0, max_rows).to_pylist() if keys else []
                for r in show:
                    say("      " + ", ".join(f"{k}={v}" for k, v in r.items()))
                if t.num_rows > max_rows:
                    say(f"      … {t.num_rows - max_rows} more rows")
            except Exception as e:  # noqa: BLE001 - an unreadable shard is itself a finding
                say(f"      (unreadable: {e})")
                integrity.append(f"{p}: unreadable ({e})")
                check["status"] = f"unreadable ({e})"
        say(f"    job {pv.get('job')}, model {pv.get('model')}" + (f", layer {pv['layer']}" if "layer" in pv else ""))
        say(f"    code    {_fmt_code(pv.get('code', {}))}")
        say(f"    config  {_fmt_params(pv.get('params', {}))}")
        fam = SHARD_FAMILIES[shard_family(p)]
        seeds = pv.get("seed_scheme") or JOBS[fam.job].seed_scheme
        if "samples" in pv:
            seeds += f"; samples {pv['samples']}"
        say(f"    seeds   {seeds}")
        srule = rule_of(workdir, p) or fam.job
        say(f"    rule    {srule}")
        say(f"    rebuild {_cmd(srule, p, configfiles)}")
    say("")

    # the tensors behind the contributing shards
    say("Tensors")
    by_model: OrderedDict[str, list[str]] = OrderedDict()
    for p in contributing:
        by_model.setdefault(provs[p].get("model"), []).append(p)
    models_for_tensors = list(by_model) or sub_models
    for m in models_for_tensors:
        sdir = workdir / layout.tensors_dir(model_name(m, f"{prov_path.name}: shard provenance"))
        mpath = sdir / "manifest.json"
        if not mpath.exists():
            say(f"  {m}: no tensor store at {sdir.relative_to(workdir)}")
            integrity.append(f"{m}: tensor store missing")
            store_checks.append({"model": m, "path": str(sdir.relative_to(workdir)), "status": "missing"})
            continue
        manifest = json.loads(mpath.read_text())
        store_file = sdir / "tensors.safetensors"
        sha = sha256_file(store_file) if store_file.exists() else None
        st = "matches manifest" if sha == manifest.get("store_sha256") else "DIFFERS from manifest"
        if st != "matches manifest":
            integrity.append(f"{m}: {store_file.name} sha256 differs from its manifest")
        src = {"source": manifest.get("source", {})}
        store_checks.append({"model": m, "path": str(store_file.relative_to(workdir)), "source": _fmt_source(src),
                             "status": "ok" if st == "matches manifest" else "sha256 differs from the manifest"})
        say(f"  model {m}: {store_file.relative_to(workdir)} sha256 {str(sha)[:16]}… ({st}); "
            f"manifest sha256 {sha256_file(mpath)[:16]}…")
        say(f"    source   {_fmt_source(src)}; adapter {manifest.get('adapter')}; format {manifest.get('format')}; "
            f"headgeom {manifest.get('headgeom_version')}")
        for fobj in manifest.get("files", []):
            say(f"    file     {fobj.get('name')}  sha256 {fobj.get('sha256')}" + (f"  ({fobj['size']} bytes)" if "size" in fobj else ""))
        seen: dict[str, dict] = {}
        for p in by_model.get(m, []):
            pv = provs[p]
            src_rec = (pv.get("model_source") or {}).get("store_sha256")
            if src_rec and src_rec != manifest.get("store_sha256"):
                integrity.append(f"{p}: computed from another store (store sha256 {src_rec[:16]}…)")
                say(f"    {p}: computed from store {src_rec[:16]}…, not the store here")
                store_checks.append({"model": m, "path": p, "status": f"computed from another store ({src_rec[:16]}…)"})
            for k, s, status in verify_tensors(pv, manifest):
                if k in seen:
                    seen[k]["shards"] += 1
                    continue
                seen[k] = {"model": m, "tensor": k, "sha256": s, "shards": 1,
                           "status": "ok" if status == "matches manifest" else status}
                tensor_checks.append(seen[k])
                entry = manifest["tensors"].get(k, {})
                say(f"    tensor   {k}  sha256 {s}  {entry.get('source_dtype', '')}->{entry.get('dtype', '')} "
                    f"{entry.get('shape', '')}  ({status})")
                if status != "matches manifest":
                    integrity.append(f"{p}: tensor {k} {status}")
    if not contributing:
        for m in sub_models:
            mp = workdir / layout.manifest(m)
            if mp.exists():
                say(f"    manifest {mp.relative_to(workdir)} sha256 {sha256_file(mp)}")
    say("")

    result = {"table": name, "value": value, "integrity": integrity, "shards": None, "tensors": None}
    tmp_owner = None
    if tmpdir is None:
        tmp_owner = tempfile.mkdtemp(prefix="headgeom-audit-")
        tmpdir = tmp_owner
    tmp = Path(tmpdir)
    try:
        say("Recompute")
        # (a) from the shards, exactly as listed
        try:
            csv_a = rebuild_table(agg, workdir, tmp / "from_shards")
            ca, ra = read_csv(csv_a)
            ia = select_row(ca, ra, filters, where=f"{name} recomputed from the shards")
            va = ra[ia].get(column, "")
            ok_a, how_a = compare(value, va)
        except Exception as e:  # noqa: BLE001 - a shard that cannot be aggregated is a finding
            va, ok_a, how_a = "", False, f"could not recompute: {type(e).__name__}: {e}"
        result["shards"] = (ok_a, how_a, va)
        say(f"  (a) from the {len(agg.inputs)} listed shards: {va}  -> {_verdict(ok_a, how_a)} ({how_a})")

        # (b) from the tensors: recompute the contributing shards, aggregate them
        if tensors:
            root = tmp / "from_tensors"
            sub_groups = OrderedDict((key, [p for p in ps if p in feeding]) for key, ps in agg.groups.items())
            try:
                recompute_shards(contributing, provs, workdir, root, log=say)
                csv_b = rebuild_table(agg, workdir, tmp / "from_tensors_table", root, groups=sub_groups,
                                     models=sub_models)
                cb, rb = read_csv(csv_b)
                ib = select_row(cb, rb, filters, where=f"{name} recomputed from the tensors")
                vb = rb[ib].get(column, "")
                ok_b, how_b = compare(value, vb)
            except Exception as e:  # noqa: BLE001 - e.g. a tensor that fails its manifest sha256
                vb, ok_b, how_b = "", False, f"could not recompute: {type(e).__name__}: {e}"
            result["tensors"] = (ok_b, how_b, vb)
            say(f"  (b) from the tensors ({len(contributing)} shards recomputed, models {', '.join(sub_models)}): "
                f"{vb}  -> {_verdict(ok_b, how_b)} ({how_b})")
        else:
            say("  (b) from the tensors: skipped (--no-tensors)")
    finally:
        if tmp_owner:
            shutil.rmtree(tmp_owner, ignore_errors=True)
    if integrity:
        say("")
        say("Integrity problems")
        for x in integrity:
            say(f"  {x}")
    ok = bool(result["shards"] and result["shards"][0]) and (not tensors or bool(result["tensors"] and result["tensors"][0])) \
        and not integrity
    result["ok"] = ok
    result["nan"] = ok and result["shards"][1] == NAN_BOTH
    if result["nan"]:
        verdict = ("NaN — the table's value is NaN (undefined) and recomputes as NaN"
                   + (" from its shards and from the tensors" if tensors else " from its shards")
                   + "; the undefined value is reproduced, but there is no number to compare")
    else:
        verdict = ("MATCH — the number is reproduced from its shards" + (" and from the tensors" if tensors else "")
                   if ok else "MISMATCH — see above")
    say("")
    say("Verdict: " + verdict)

    if view == "full":
        return result
    # the one-screen summary and the JSON report: the rows behind the number, the config, counts
    try:
        rows_behind = feeding_rows(agg, workdir, row_model if per_model else None, filters, column, feeding)
    except Exception as e:  # noqa: BLE001 - e.g. an unreadable shard: already an integrity problem
        rows_behind = {"error": f"{type(e).__name__}: {e}"}
    result["report"] = {
        "number": {"table": name, "csv": csv_rel, "row": filters, "column": column, "value": value},
        "rows": rows_behind,
        "rule": {"name": rule, "rebuild": _cmd(rule, csv_rel, configfiles)},
        "builder": {"function": agg.function, "aggregation": sidecar.get("aggregation"), "models": agg.models,
                    "feeding": why},
        "code": _code_report(sidecar.get("code", {}), [provs[p].get("code", {}) for p in contributing]),
        "config": merged_config(agg.params, [provs[p] for p in contributing]),
        "inputs": {"shards": shard_checks, "stores": store_checks, "tensors": tensor_checks},
        "verdicts": {
            "shards": _verdict_report(result["shards"], f"from the {len(agg.inputs)} listed shards"),
            "tensors": (_verdict_report(result["tensors"], f"from the tensors ({len(contributing)} shards recomputed, "
                                                          f"models {', '.join(sub_models)})")
                        if tensors else None),
        },
        "integrity": list(integrity),
        "verdict": verdict.split(" — ")[0],
        "verdict_text": verdict,
        "ok": ok,
    }
    if view == "short":
        for line in render_short(result["report"], max_rows=max_rows):
            out(line)
    return result


# ------------------------------------------------------------------ the one-screen view


def _verdict_report(res, what: str) -> dict:
    ok, how, v = res
    return {"what": what, "value": v, "verdict": _verdict(ok, how), "how": how, "ok": ok}


def _code_report(table_code: dict, shard_codes: list[dict]) -> dict:
    """The table's code version, how many distinct versions its feeding shards were made with,
    and the version of the code doing the recomputation."""
    def key(c):
        return (c.get("headgeom"), c.get("source_sha256"), c.get("git_commit"), c.get("git_dirty"))

    versions = OrderedDict((key(c), c) for c in shard_codes)
    return {"table": table_code, "shards": list(versions.values()), "now": code_version()}


def merged_config(table_params: dict, shard_provs: list[dict]) -> dict:
    """The config values that shaped the number, each key once: the table's params, then the
    feeding shards' params (a key whose value differs between shards lists every value, with how
    many shards have it; a shard key equal to the table's is not repeated)."""
    out: OrderedDict[str, dict] = OrderedDict()
    for k, v in sorted(table_params.items()):
        out[k] = {"value": v, "from": "table"}
    counts: OrderedDict[str, OrderedDict[str, list]] = OrderedDict()
    for pv in shard_provs:
        for k, v in sorted((pv.get("params") or {}).items()):
            enc = json.dumps(v, sort_keys=True, default=str)
            counts.setdefault(k, OrderedDict()).setdefault(enc, [v, 0])[1] += 1
    for k in sorted(counts):
        vals = list(counts[k].values())
        if k in out and len(vals) == 1 and json.dumps(vals[0][0], sort_keys=True, default=str) == json.dumps(
                out[k]["value"], sort_keys=True, default=str):
            out[k]["from"] = "table and shards"
            continue
        if len(vals) == 1:
            entry = {"value": vals[0][0], "from": f"{vals[0][1]} shards"}
        else:
            entry = {"values": [{"value": v, "shards": n} for v, n in vals], "from": "shards"}
        out[k if k not in out else f"{k} (shards)"] = entry
    return dict(out)


TRACE_KEYS = ("model", "layer", "layer_r", "kind", "null", "sample", "test", "head", "head_i", "head_j", "head_w",
              "head_r")  # the key columns the full trace shows of a shard's rows
ID_KEYS = TRACE_KEYS + ("layer_w", "pair", "comparison", "checkpoint")  # columns that name a row, not measure it
REFINE_MAX_VALUES = 8  # a key with at most this many values in the feeding rows is tried value by value
PERTURB_BUDGET_S = 6.0  # builder reruns to find the columns the number moves with, at most this long


def _row_of(rows: list[dict], filters: dict[str, str]) -> int | None:
    hits = [i for i, r in enumerate(rows) if all(k in r and _cell_eq(str(r[k]), v) for k, v in filters.items())]
    return hits[0] if len(hits) == 1 else None


def _same(a, b) -> bool:
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return (math.isnan(fa) and math.isnan(fb)) or fa == fb


def _plain(v):
    """A shard value as JSON-ready Python (NaN as None)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    return v


def feeding_rows(agg: Aggregation, workdir: Path, row_model: str | None, filters: dict[str, str], column: str,
                 feeding: set[str], max_items: int = 16) -> dict:
    """The shard rows and columns the number was computed from, found from what the table's builder reads.

    The builder is run on the listed shards with every family's columns wrapped so that the
    columns it reads are recorded (``headgeom.outputs.build.ReadLog``). Each numeric column
    read is then set to NaN in the feeding rows (those of the row's model, when the table is per
    model) and the builder run again: the columns whose loss changes the number are the ones it
    uses (within PERTURB_BUDGET_S; past it, every column read is shown). Per family: the feeding
    rows' count, for each numeric param of the table that falls inside a used column's range the
    count of rows at or above it, and the top rows (those at or above that param, or those whose
    value is the number itself, or the largest first)."""
    groups = {fam: [str(workdir / p) for p in ps] for fam, ps in agg.groups.items()}
    manifests = [str(workdir / layout.manifest(m)) for m in agg.models]
    params = dict(agg.params)
    out, data, _provs, fields = prepare("table", agg.name, groups, manifests, params)
    # the builder is rerun on the row's model's rows alone when that makes the row (faster); else on all
    full = data
    tries = [(full, list(agg.models))]
    if row_model and len(agg.models) > 1:
        own = {fam: ({c: np.asarray(v)[np.asarray(cols["model"]) == row_model] for c, v in cols.items()}
                     if isinstance(cols, dict) and "model" in cols else cols) for fam, cols in full.items()}
        tries.insert(0, (own, [row_model]))
    i = None
    for data, models in tries:
        log: dict[str, set] = {}
        t0 = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            base = out.call(traced(data, log), fields, models, params)
        t_build = time.perf_counter() - t0
        i = _row_of(base.rows, filters)
        if i is not None:
            break
    if i is None:
        return {"error": "the rebuilt table has no single row with the filters"}
    v0 = base.rows[i].get(column)

    def n_rows(cols):
        return len(next(iter(cols.values()))) if cols else 0

    masks, candidates = {}, []
    for fam in out.families:
        cols = data.get(fam) or {}
        if not cols:
            continue
        mask = np.ones(n_rows(cols), dtype=bool)
        if row_model and "model" in cols:
            mask = np.asarray(cols["model"]) == row_model
        masks[fam] = mask
        for c in sorted(log.get(fam, ())):
            a = np.asarray(cols.get(c)) if c in cols else None
            if a is not None and c not in ID_KEYS and a.dtype.kind in "fiub" and mask.any():
                candidates.append((fam, c))

    method = "perturbed"
    used: dict[str, list[str]] = {}
    needed: dict[str, list[str]] = {}  # columns the builder cannot do without (it fails when they are NaN)
    narrowed: dict[str, np.ndarray] = {}  # family -> the feeding rows that move the number
    budget, times = [PERTURB_BUDGET_S], [t_build]

    def moves(fam, cs, rows_mask):
        """Does the number change when columns cs of family fam are NaN in rows_mask? (None: the builder fails)"""
        d2 = dict(data)
        d2[fam] = dict(data[fam])
        for c in cs:
            a = np.asarray(data[fam][c])
            b = a.astype(float) if a.dtype.kind in "iub" else a.copy()
            b[rows_mask] = np.nan
            d2[fam][c] = b
        t1 = time.perf_counter()
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                t = out.call(d2, fields, models, params)
            j = _row_of(t.rows, filters)
            res = j is None or not _same(t.rows[j].get(column), v0)
        except Exception:  # noqa: BLE001 - the builder cannot do without the column
            res = None
        times.append(time.perf_counter() - t1)
        budget[0] -= times[-1]
        return res

    by_fam: OrderedDict[str, list[str]] = OrderedDict()
    for fam, c in candidates:
        by_fam.setdefault(fam, []).append(c)
    for fam, cs in by_fam.items():
        # all of a family's columns at once first: a family that does not move the number is done in one build
        if budget[0] > 0 and len(cs) > 1 and moves(fam, cs, masks[fam]) is False:
            continue
        for c in cs:
            m = moves(fam, [c], masks[fam]) if budget[0] > 0 else True
            if budget[0] <= 0:
                method = "read"  # out of time: the columns not tried are shown as read
            if m:
                used.setdefault(fam, []).append(c)
            elif m is None:
                needed.setdefault(fam, []).append(c)
    if method == "perturbed":
        # narrow the feeding rows: a key column (kind, null, ...) whose values do not all move the number
        for fam, cs in used.items():
            cols, sel = data[fam], masks[fam].copy()
            for k in ID_KEYS:
                if k == "model" or k not in cols:
                    continue
                keyvals = np.asarray(cols[k]).astype(str)
                vals = sorted(set(keyvals[sel]))
                if not 1 < len(vals) <= REFINE_MAX_VALUES or budget[0] < min(times) * len(vals):
                    continue
                keep = [v for v in vals if moves(fam, cs, sel & (keyvals == v)) is not False]
                if keep and len(keep) < len(vals):
                    sel &= np.isin(keyvals, keep)
            narrowed[fam] = sel

    families = []
    num_params = [(k, float(v)) for k, v in sorted(params.items())
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    for fam in out.families:
        if fam not in used:
            continue
        cols = data[fam]
        sel = narrowed.get(fam, masks[fam]).copy()
        for k, v in filters.items():  # the row's other keys, where the shards have that column too
            if k != "model" and k in cols:
                sub = sel & np.array([_cell_eq(str(x), v) for x in np.asarray(cols[k])])
                if sub.any():
                    sel = sub
        idx = np.flatnonzero(sel)
        ids = [k for k in ID_KEYS if k in cols and len({str(x) for x in np.asarray(cols[k])[idx]}) > 1]
        unit = "heads" if "head" in cols else "rows"
        ucols = used[fam]
        counts, order = [], None
        for c in ucols:
            x = np.asarray(cols[c], dtype=float)[idx]
            fin = x[np.isfinite(x)]
            for pname, t in num_params:
                if fin.size and fin.min() <= t <= fin.max():
                    k_at = np.isfinite(x) & (x >= t)
                    counts.append({"column": c, "param": pname, "threshold": _plain(t), "count": int(k_at.sum()),
                                   "of": int(idx.size)})
                    if order is None:
                        hit = idx[k_at]
                        order = hit[np.argsort(-np.asarray(cols[c], dtype=float)[hit], kind="stable")]
        how = None
        if order is not None:
            how = f"{counts[0]['column']} ≥ {counts[0]['param']}, largest first"
        else:
            try:
                fv = float(v0)
            except (TypeError, ValueError):
                fv = float("nan")
            for c in ucols:
                x = np.asarray(cols[c], dtype=float)[idx]
                eq = np.isfinite(x) & (np.abs(x - fv) <= RTOL * max(abs(fv), 1e-300))
                if math.isfinite(fv) and eq.any():
                    order, how = idx[eq], f"{c} equal to the number"
                    break
        if order is None:
            x = np.asarray(cols[ucols[0]], dtype=float)[idx]
            order = idx[np.argsort(np.where(np.isfinite(x), -x, np.inf), kind="stable")]
            how = f"largest {ucols[0]} first"
        top = [{k: _plain(np.asarray(cols[k])[j]) for k in [*ids, *ucols]} for j in order[:max_items]]
        families.append({
            "family": fam, "shards": sum(1 for p in agg.groups.get(fam, []) if p in feeding),
            "rows": int(idx.size), "unit": unit,
            "selection": (f"model = {row_model}" if row_model else "all models")
            + "".join(f", {k} = {v}" for k, v in filters.items() if k != "model" and k in cols),
            "read": sorted(log.get(fam, ())), "used": ucols, "needed": needed.get(fam, []), "ids": ids,
            "counts": counts,
            "order": how, "top": top, "more": int(max(len(order) - max_items, 0)),
        })
    return {"method": method, "builder_seconds": round(t_build, 3), "families": families}


def _g(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "nan" if v is None else str(v)


def _wrap(items: list[str], first: str, indent: str = "      ", width: int = 110, max_lines: int = 3,
          extra: int = 0) -> list[str]:
    """``first`` then the items joined by "; ", wrapped at ``width``, at most ``max_lines`` lines; what does
    not fit (and ``extra`` more not given) is counted at the end."""
    lines, cur, shown = [], first, 0
    for it in items:
        piece = it if cur.endswith(": ") or cur == indent else "; " + it
        if len(cur) + len(piece) > width and cur.strip():
            if len(lines) + 1 >= max_lines:
                break
            lines.append(cur.rstrip())
            cur, piece = indent, it
        cur += piece
        shown += 1
    if shown < len(items) + extra:
        cur += f"; … {len(items) - shown + extra} more"
    lines.append(cur)
    return lines


def _fmt_value(v) -> str:
    return json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v


def render_short(rep: dict, max_rows: int = 5) -> list[str]:
    """The audit on one screen (about 30 lines): the number; the shard rows behind it; rule,
    builder and code; the config, each key once; the inputs verified, as counts, every failure
    on its own line; the recomputations and the verdict."""
    L = []
    n = rep["number"]
    row = ", ".join(f"{k}={v}" for k, v in n["row"].items())
    L.append(f"{n['table']} [{row}] {n['column']} = {n['value']}   ({n['csv']})")

    r = rep["rows"]
    if "error" in r:
        L.append(f"Computed from: (rows not shown: {r['error']})")
    elif not r["families"]:
        L.append("Computed from: no shard column moves it (from the manifests or the table's params alone)")
    for fam in r.get("families", []):
        verb = "moves with" if r["method"] == "perturbed" else "reads"
        L.append(f"Computed from {fam['rows']} {fam['unit']} of {fam['family']} ({fam['selection']}, "
                 f"{fam['shards']} shards); the number {verb} {', '.join(fam['used'])}")

        def item(t):
            ids = " ".join(f"{k} {_g(t[k])}" for k in fam["ids"])
            vals = " ".join(f"{c}={_g(t[c])}" for c in fam["used"])
            return (ids + " " + vals).strip()

        items = [item(t) for t in fam["top"]]
        more = fam["more"]
        if fam["counts"]:
            for c in fam["counts"][1:]:
                L.append(f"  {c['count']} of {c['of']} {fam['unit']} with {c['column']} ≥ {_g(c['threshold'])} ({c['param']})")
            c = fam["counts"][0]
            head = f"  {c['count']} of {c['of']} {fam['unit']} with {c['column']} ≥ {_g(c['threshold'])} ({c['param']}): "
        else:
            head = f"  {fam['order']}: "
        L.extend(_wrap(items, head, indent="    ", max_lines=4, extra=more))

    rule, b = rep["rule"], rep["builder"]
    L.append(f"Rule {rule['name']}: {b['function']}")
    L.append(f"  rebuild: {rule['rebuild']}")
    code = rep["code"]

    def cv(c):
        if not c:
            return "?"
        s = f"headgeom {c.get('headgeom', '?')}"
        if c.get("git_commit"):
            s += f" git {c['git_commit'][:12]} ({'dirty' if c.get('git_dirty') else 'clean'})"
        else:
            s += " (no git commit recorded)"
        return s + f", source {str(c.get('source_sha256', '?'))[:12]}"

    sh = code["shards"]
    same = len(sh) == 1 and sh[0] == code["table"]
    L.append(f"Code: table {cv(code['table'])}; shards "
             + ("the same" if same else ("none" if not sh else f"{len(sh)} version(s): " + " | ".join(cv(c) for c in sh[:3])))
             + f"; now {cv(code['now'])}")
    cfg, first_shard = [], True
    for k, v in rep["config"].items():
        s = (f"{k}={_fmt_value(v['value'])}" if "value" in v else
             f"{k}=" + " | ".join(f"{_fmt_value(x['value'])} ({x['shards']} shards)" for x in v["values"]))
        if v["from"] not in ("table", "table and shards") and first_shard:
            s, first_shard = "shards: " + s, False
        cfg.append(s)
    L.extend(_wrap(cfg, "Config (table, then shards; each key once): ", indent="  ", max_lines=5))

    inp = rep["inputs"]
    shards, stores, tensors = inp["shards"], inp["stores"], inp["tensors"]
    feed = [s for s in shards if s["feeds"]]

    def ok_count(items, noun):
        bad = sum(1 for x in items if x["status"] != "ok")
        noun = noun if len(items) == 1 else noun + "s"
        return f"{len(items)} {noun} " + ("sha256 OK" if not bad else f"checked, {bad} FAILED")

    L.append(f"Inputs: {ok_count(shards, 'shard')} ({len(feed)} feed the row); {ok_count(stores, 'tensor store')}; "
             f"{ok_count(tensors, 'tensor')} (shards' recorded hashes against the manifest)")
    for x in rep["integrity"]:  # every failure, one line each
        L.append(f"  FAILED {x}")
    v = rep["verdicts"]
    L.append(f"Recompute (a) {v['shards']['what']}: {v['shards']['value']} -> {v['shards']['verdict']} ({v['shards']['how']})")
    if v["tensors"]:
        t = v["tensors"]
        L.append(f"          (b) {t['what']}: {t['value']} -> {t['verdict']} ({t['how']})")
    else:
        L.append("          (b) from the tensors: skipped (--no-tensors)")
    L.append(f"Verdict: {rep['verdict_text']}")
    L.append("(--full: every shard's provenance and every tensor hash; --json: this audit as JSON)")
    return L


def report_json(result: dict) -> str:
    """The audit's report as one JSON object (strict JSON: NaN written as null)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else str(x)
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return _plain(x) if not isinstance(x, (str, int, bool, type(None))) else x

    return json.dumps(clean(result["report"]), indent=1, default=str, allow_nan=False)
