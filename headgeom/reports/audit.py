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
    by their family's job (``headgeom.jobs.families``; every tensor read is checked against its
    manifest sha256), then aggregated the same way.

Works for every table of the output registry (``headgeom.reports.outputs.TABLES``): the table is
rebuilt by ``build_output`` from its sidecar's shards and params."""

from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
from base64 import urlsafe_b64encode
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from headgeom.io.files import sha256_file

RTOL = 1e-12

class AuditError(Exception):
    """The number cannot be audited as asked (no such table, row or column, no sidecar)."""


def inside(root: Path, rel, what: str) -> Path:
    """``root / rel`` for a path from a sidecar that stays inside ``root``; AuditError if not."""
    from headgeom.io.checkpoint import contained

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
        family_of(str(rel))
        if not isinstance(rec.get("provenance", {}), dict):
            raise AuditError(f"{prov_path}: input {rec['path']}: 'provenance' must be an object")
    from headgeom.io.files import set_problems

    problems = set_problems(prov_path, sidecar)
    if problems:
        raise AuditError(f"{prov_path.name}: the table's files are not one complete set (interrupted write?): "
                         + "; ".join(problems) + ". Rebuild the table.")
    return sidecar


# ------------------------------------------------------------------ reading tables


def table_paths(workdir: Path, table: str) -> tuple[str, Path, Path]:
    """TABLE may be a name (closure_tail) or a path to its CSV; returns (name, csv, sidecar)."""
    p = Path(table)
    if p.suffix == ".csv" or "/" in table:
        csv_path = p if p.is_absolute() else workdir / p
        name = csv_path.name.removesuffix(".csv")
    else:
        name = table
        csv_path = workdir / "results" / "tables" / f"{name}.csv"
    prov = csv_path.with_name(f"{name}.prov.json")
    if not csv_path.exists():
        known = sorted(x.stem for x in (workdir / "results" / "tables").glob("*.csv"))
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


def family_of(path: str) -> str:
    """The shard family of a path (the registry headgeom.jobs.families)."""
    from headgeom.jobs.families import family_of as registry_family_of

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

    @property
    def function(self) -> str:
        return f"headgeom.reports.outputs.build_output('table', {self.name!r})"


def table_output(name: str):
    """The table's entry in the output registry."""
    from headgeom.reports.outputs import TABLES

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
        groups.setdefault(family_of(rec["path"]), []).append(rec["path"])
    # The sidecar does not list the models the rule was given (params.models is left out of it);
    # they are the shards' models in input order (the rules list shards model by model), or,
    # for a table without shards, the table's model column.
    models = _unique(rec["provenance"]["model"] for rec in inputs if "model" in rec.get("provenance", {}))
    if not models:
        models = _unique(r["model"] for r in table_rows if r.get("model") not in (None, "", "pooled"))
    models = [model_name(m, f"{name} sidecar") for m in models]
    return Aggregation(name, dict(sidecar.get("params", {})), models, inputs, groups)


def run_aggregation(agg: Aggregation, workdir: Path, shard_root: Path, out_dir: Path,
                    groups: "OrderedDict[str, list[str]] | None" = None, models: list[str] | None = None) -> Path:
    """Run the table's aggregation job on shards (paths relative to ``shard_root``) and return
    the CSV it wrote into ``out_dir``."""
    groups = agg.groups if groups is None else groups
    models = agg.models if models is None else models
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = {ext: str(out_dir / f"{agg.name}.{ext}") for ext in ("csv", "md", "tex")}
    outputs["prov"] = str(out_dir / f"{agg.name}.prov.json")
    manifests = {m: str(workdir / "results" / "tensors" / m / "manifest.json") for m in models}
    from headgeom.reports.outputs import build_output

    inputs = {fam: [str(shard_root / p) for p in groups.get(fam, [])] for fam in table_output(agg.name).families}
    build_output("table", agg.name, inputs, list(manifests.values()), models, outputs, dict(agg.params))
    return Path(outputs["csv"])


# ------------------------------------------------------------------ recomputing shards


def activations_dir(model: str, prov: dict) -> str:
    """The forward pass's directory (relative to the run) an activation shard was computed from,
    as its provenance records it: results/activations/<model>/<corpus>/<n>x<w>."""
    act = prov.get("activations") or {}
    win = act.get("windows") or {}
    return f"results/activations/{model}/{act.get('corpus')}/{win.get('n_windows')}x{win.get('window')}"


def recompute_shards(paths: list[str], provs: dict[str, dict], workdir: Path, out_root: Path, log=print) -> None:
    """Recompute per-layer shards from the tensor store into out_root/<same relative path>, each
    by its family's job in the registry (headgeom.jobs.families), with the params its
    provenance records; a job that writes several families writes all of them."""
    from headgeom.jobs.families import FAMILIES, JOBS, run_job

    quiet = lambda *a, **k: None  # noqa: E731
    done: set[str] = set()
    for p in paths:
        if p in done:
            continue
        prov = provs[p]
        inside(out_root, p, "shard to recompute")  # a path that leaves out_root is refused, never written
        fam = FAMILIES[family_of(p)]
        job, model = JOBS[fam.job], model_name(prov.get("model"), p)
        params = dict(prov.get("params", {}))
        tensors = workdir / "results" / "tensors"
        final = model_name(params.get("final_model", model), p)
        inputs = {"manifest": str(tensors / model / "manifest.json"),
                  "final_manifest": str(tensors / final / "manifest.json")}
        if job.activations:  # the forward pass's directory the shard was computed from (its provenance)
            inputs["acts"] = str(inside(workdir, activations_dir(model, prov), "activations of the shard"))
        outputs = {}
        for f in job.families:
            rel = p.replace(f"results/shards/{fam.name}/", f"results/shards/{f.name}/", 1)
            target = inside(out_root, rel, "shard to recompute")
            family_of(str(target.relative_to(out_root)))
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
    cmd = f"snakemake -c2 --forcerun {rule} {target}"
    if configfiles:
        cmd += " --configfile " + " ".join(configfiles)
    return cmd


def audit(workdir, table: str, row: list[str] | dict, column: str, *, tensors: bool = True,
          configfiles: list[str] = (), out=print, tmpdir=None, max_rows: int = 5) -> dict:
    """Explain and recompute one cell. Returns {'value', 'shards': (ok, how), 'tensors': (ok, how) | None,
    'integrity': [problems]}; ``ok`` is True when all checks pass."""
    import pyarrow.parquet as pq

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

    out(f"Audit of {csv_rel}, row {', '.join(f'{k}={v}' for k, v in filters.items())}, column {column}")
    out(f"  value in the table: {value}")
    out("")
    out("Aggregation")
    out(f"  function   {agg.function}   (sidecar: {sidecar.get('aggregation')})")
    out(f"  params     {_fmt_params(agg.params)}")
    out(f"  models     {', '.join(agg.models) or '(none)'}")
    out(f"  code       {_fmt_code(sidecar.get('code', {}))}")
    out(f"  rule       {rule}")
    out(f"  rebuild    {_cmd(rule, csv_rel, configfiles)}")
    out("")

    # which shards feed this row: those of the row's model when the table is per model
    row_model = rows[i].get("model")
    provs = {rec["path"]: rec.get("provenance", {}) for rec in agg.inputs}
    shard_models = {p.get("model") for p in provs.values()}
    if row_model and row_model in shard_models:
        contributing = [rec["path"] for rec in agg.inputs if rec.get("provenance", {}).get("model") == row_model]
        sub_models = [row_model]
        why = f"model = {row_model}"
    else:
        contributing = [rec["path"] for rec in agg.inputs]
        sub_models = list(agg.models)
        why = "all listed shards" if agg.inputs else "no shards (from the manifests alone)"

    out(f"Shards ({len(agg.inputs)} listed in the sidecar; {len(contributing)} feed this row: {why})")
    for rec in agg.inputs:
        p = rec["path"]
        f = inside(workdir, p, f"{prov_path.name}: input")
        if not f.exists():
            state = "MISSING"
            integrity.append(f"{p} is missing")
        else:
            sha = sha256_file(f)
            if sha == rec.get("sha256"):
                state = "sha256 matches sidecar"
            else:
                state = f"sha256 DIFFERS from sidecar (file {sha[:16]}…, sidecar {rec.get('sha256', '')[:16]}…)"
                integrity.append(f"{p}: file sha256 differs from the sidecar's")
        if p not in contributing:
            continue
        pv = rec.get("provenance", {})
        out(f"  {p}")
        out(f"    rows {rec.get('rows')}, {state}")
        if f.exists() and max_rows:
            try:
                t = pq.read_table(f)
                keys = [c for c in ("model", "layer", "layer_r", "kind", "null", "sample", "test", "head", "head_i",
                                    "head_j", "head_w", "head_r") if c in t.column_names]
                if column in t.column_names and column not in keys:
                    keys.append(column)
                show = t.select(keys).slice(0, max_rows).to_pylist() if keys else []
                for r in show:
                    out("      " + ", ".join(f"{k}={v}" for k, v in r.items()))
                if t.num_rows > max_rows:
                    out(f"      … {t.num_rows - max_rows} more rows")
            except Exception as e:  # noqa: BLE001 - an unreadable shard is itself a finding
                out(f"      (unreadable: {e})")
                integrity.append(f"{p}: unreadable ({e})")
        out(f"    job {pv.get('job')}, model {pv.get('model')}" + (f", layer {pv['layer']}" if "layer" in pv else ""))
        out(f"    code    {_fmt_code(pv.get('code', {}))}")
        out(f"    config  {_fmt_params(pv.get('params', {}))}")
        from headgeom.jobs.families import FAMILIES, JOBS

        fam = FAMILIES[family_of(p)]
        seeds = pv.get("seed_scheme") or JOBS[fam.job].seed_scheme
        if "samples" in pv:
            seeds += f"; samples {pv['samples']}"
        out(f"    seeds   {seeds}")
        srule = rule_of(workdir, p) or fam.job
        out(f"    rule    {srule}")
        out(f"    rebuild {_cmd(srule, p, configfiles)}")
    out("")

    # the tensors behind the contributing shards
    out("Tensors")
    by_model: OrderedDict[str, list[str]] = OrderedDict()
    for p in contributing:
        by_model.setdefault(provs[p].get("model"), []).append(p)
    models_for_tensors = list(by_model) or sub_models
    for m in models_for_tensors:
        sdir = workdir / "results" / "tensors" / model_name(m, f"{prov_path.name}: shard provenance")
        mpath = sdir / "manifest.json"
        if not mpath.exists():
            out(f"  {m}: no tensor store at {sdir.relative_to(workdir)}")
            integrity.append(f"{m}: tensor store missing")
            continue
        manifest = json.loads(mpath.read_text())
        store_file = sdir / "tensors.safetensors"
        sha = sha256_file(store_file) if store_file.exists() else None
        st = "matches manifest" if sha == manifest.get("store_sha256") else "DIFFERS from manifest"
        if st != "matches manifest":
            integrity.append(f"{m}: {store_file.name} sha256 differs from its manifest")
        out(f"  model {m}: {store_file.relative_to(workdir)} sha256 {str(sha)[:16]}… ({st}); "
            f"manifest sha256 {sha256_file(mpath)[:16]}…")
        src = {"source": manifest.get("source", {})}
        out(f"    source   {_fmt_source(src)}; adapter {manifest.get('adapter')}; format {manifest.get('format')}; "
            f"headgeom {manifest.get('headgeom_version')}")
        for fobj in manifest.get("files", []):
            out(f"    file     {fobj.get('name')}  sha256 {fobj.get('sha256')}" + (f"  ({fobj['size']} bytes)" if "size" in fobj else ""))
        seen = set()
        for p in by_model.get(m, []):
            pv = provs[p]
            src_rec = (pv.get("model_source") or {}).get("store_sha256")
            if src_rec and src_rec != manifest.get("store_sha256"):
                integrity.append(f"{p}: computed from another store (store sha256 {src_rec[:16]}…)")
                out(f"    {p}: computed from store {src_rec[:16]}…, not the store here")
            for k, s, status in verify_tensors(pv, manifest):
                if k in seen:
                    continue
                seen.add(k)
                entry = manifest["tensors"].get(k, {})
                out(f"    tensor   {k}  sha256 {s}  {entry.get('source_dtype', '')}->{entry.get('dtype', '')} "
                    f"{entry.get('shape', '')}  ({status})")
                if status != "matches manifest":
                    integrity.append(f"{p}: tensor {k} {status}")
    if not contributing:
        for m in sub_models:
            mp = workdir / "results" / "tensors" / m / "manifest.json"
            if mp.exists():
                out(f"    manifest {mp.relative_to(workdir)} sha256 {sha256_file(mp)}")
    out("")

    result = {"table": name, "value": value, "integrity": integrity, "shards": None, "tensors": None}
    tmp_owner = None
    if tmpdir is None:
        tmp_owner = tempfile.mkdtemp(prefix="headgeom-audit-")
        tmpdir = tmp_owner
    tmp = Path(tmpdir)
    try:
        out("Recompute")
        # (a) from the shards, exactly as listed
        try:
            csv_a = run_aggregation(agg, workdir, workdir, tmp / "from_shards")
            ca, ra = read_csv(csv_a)
            ia = select_row(ca, ra, filters, where=f"{name} recomputed from the shards")
            va = ra[ia].get(column, "")
            ok_a, how_a = compare(value, va)
        except Exception as e:  # noqa: BLE001 - a shard that cannot be aggregated is a finding
            va, ok_a, how_a = "", False, f"could not recompute: {type(e).__name__}: {e}"
        result["shards"] = (ok_a, how_a, va)
        out(f"  (a) from the {len(agg.inputs)} listed shards: {va}  -> {_verdict(ok_a, how_a)} ({how_a})")

        # (b) from the tensors: recompute the contributing shards, aggregate them
        if tensors:
            root = tmp / "from_tensors"
            sub_groups = OrderedDict((key, [p for p in ps if p in contributing]) for key, ps in agg.groups.items())
            try:
                recompute_shards(contributing, provs, workdir, root, log=out)
                csv_b = run_aggregation(agg, workdir, root, tmp / "from_tensors_table", groups=sub_groups,
                                        models=sub_models)
                cb, rb = read_csv(csv_b)
                ib = select_row(cb, rb, filters, where=f"{name} recomputed from the tensors")
                vb = rb[ib].get(column, "")
                ok_b, how_b = compare(value, vb)
            except Exception as e:  # noqa: BLE001 - e.g. a tensor that fails its manifest sha256
                vb, ok_b, how_b = "", False, f"could not recompute: {type(e).__name__}: {e}"
            result["tensors"] = (ok_b, how_b, vb)
            out(f"  (b) from the tensors ({len(contributing)} shards recomputed, models {', '.join(sub_models)}): "
                f"{vb}  -> {_verdict(ok_b, how_b)} ({how_b})")
        else:
            out("  (b) from the tensors: skipped (--no-tensors)")
    finally:
        if tmp_owner:
            shutil.rmtree(tmp_owner, ignore_errors=True)
    if integrity:
        out("")
        out("Integrity problems")
        for x in integrity:
            out(f"  {x}")
    ok = bool(result["shards"] and result["shards"][0]) and (not tensors or bool(result["tensors"] and result["tensors"][0])) \
        and not integrity
    result["ok"] = ok
    result["nan"] = ok and result["shards"][1] == NAN_BOTH
    out("")
    if result["nan"]:
        out("Verdict: NaN — the table's value is NaN (undefined) and recomputes as NaN"
            + (" from its shards and from the tensors" if tensors else " from its shards")
            + "; the undefined value is reproduced, but there is no number to compare")
    else:
        out("Verdict: " + ("MATCH — the number is reproduced from its shards" + (" and from the tensors" if tensors else "")
                           if ok else "MISMATCH — see above"))
    return result
