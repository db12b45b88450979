"""The audit of one number as data: ``audit(...)`` checks and recomputes the number and returns an
``AuditReport`` (what was checked, each shard, store and tensor with its outcome, the values
recomputed and how they compare, the provenance found, every failure). It prints nothing; the
views in ``headgeom.verify.audit.views`` render it (short, full, JSON)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from headgeom import layout
from headgeom.core.errors import DamagedFileError
from headgeom.io.files import sha256_file
from headgeom.io.shards import shard_check
from headgeom.schedule.families import SHARD_FAMILIES, JOBS
from headgeom.verify.audit.read import (DAMAGED_INPUT, NAN_BOTH, AuditError, compare, inside, load_sidecar, model_name,
                                        parse_row_filters, read_csv, rule_of, select_row, shard_family, table_paths,
                                        table_rule, verdict_word)
from headgeom.verify.audit.rebuild import aggregation_from_sidecar, rebuild_table, recompute_shards, verify_tensors
from headgeom.verify.audit.rows import TRACE_KEYS, code_report, feeding_rows, merged_config

# ------------------------------------------------------------------ the report model


@dataclass
class Number:
    """The number audited: the table, its CSV (relative to the run), the row filters, the column, the value."""
    table: str
    csv: str
    row: dict
    column: str
    value: str


@dataclass
class Rule:
    """The Snakemake rule that wrote the table and the command line that rebuilds it."""
    name: str
    rebuild: str


@dataclass
class Builder:
    """The table's aggregation: the builder call, the sidecar's record of it, its models and params,
    and which of its shards feed the row (``feeding``, in words)."""
    function: str
    aggregation: str | None
    models: list
    feeding: str
    params: dict = field(default_factory=dict)


@dataclass
class ShardCheck:
    """One shard the table's sidecar lists: whether it is there and sound and has the sha256 the
    sidecar recorded (``status``: "ok" or what failed); for a shard that feeds the row, also its
    provenance (job, model, layer, code, params, seeds, rule and rebuild command) and its first rows."""
    path: str
    feeds: bool
    status: str = "ok"
    rows: int | None = None  # as the sidecar records
    sha256: str | None = None  # the file's (None when it is missing)
    sidecar_sha256: str | None = None
    damage: list = field(default_factory=list)  # what the shard's own content record finds wrong
    job: str | None = None
    model: str | None = None
    layer: object = None
    code: dict | None = None
    params: dict | None = None
    seeds: str | None = None
    rule: str | None = None
    rebuild: str | None = None
    sample: list | None = None  # its first rows, key columns and the audited column
    sample_more: int = 0  # its rows not in the sample
    unreadable: str | None = None


@dataclass
class StoreCheck:
    """A tensor store behind the feeding shards: its file against its manifest (``status``), where the
    model came from, the files it was made of. A feeding shard whose provenance names another store
    is a StoreCheck of its own, ``path`` the shard and ``computed_from`` the store sha256 it records."""
    model: str
    path: str
    status: str
    source: str | None = None
    sha256: str | None = None  # the store file's
    manifest_sha256: str | None = None  # the manifest file's
    adapter: str | None = None
    format: str | None = None
    headgeom: str | None = None
    files: list = field(default_factory=list)  # the model files: name, sha256, size
    shards: list = field(default_factory=list)  # the feeding shards computed from this model
    computed_from: str | None = None


@dataclass
class TensorCheck:
    """A tensor the feeding shards record (once, however many shards record it): the sha256 recorded
    against the store's manifest (``status``: "ok" or what failed)."""
    model: str
    tensor: str
    sha256: str
    shards: int
    status: str
    first_shard: str = ""  # the first feeding shard that records it
    source_dtype: str = ""
    dtype: str = ""
    shape: object = ""


@dataclass
class Inputs:
    """Every input checked: shards, tensor stores, tensors; for a table made without shards, the
    manifests it was made from (path, sha256)."""
    shards: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    tensors: list = field(default_factory=list)
    manifests: list = field(default_factory=list)


@dataclass
class Recompute:
    """One recomputation: what was recomputed, the value it gave, how it compares with the table's."""
    what: str
    value: str
    ok: bool
    how: str
    verdict: str = ""

    def __post_init__(self):
        self.verdict = verdict_word(self.ok, self.how)


@dataclass
class Verdicts:
    """(a) from the listed shards; (b) from the tensors (None when skipped), with the shards it recomputed."""
    shards: Recompute
    tensors: Recompute | None
    recomputed: list = field(default_factory=list)


@dataclass
class AuditReport:
    """One audit: the number, the rows behind it (None when not looked for), the rule, builder, code
    versions and config, every input checked, the recomputations, every failure (``integrity``) and
    the verdict; ``ok`` when everything matches, ``nan`` when the match is NaN = NaN."""
    number: Number
    rows: dict | None
    rule: Rule
    builder: Builder
    code: dict
    config: dict
    inputs: Inputs
    verdicts: Verdicts
    integrity: list
    verdict: str
    verdict_text: str
    ok: bool
    nan: bool


# ------------------------------------------------------------------ the audit


def _cmd(rule: str, target: str, configfiles: list[str]) -> str:
    from headgeom.io.shards import rebuild_command

    return rebuild_command(rule, target, configfiles)


def _check_shard(workdir: Path, rec: dict, where: str, feeds: bool, integrity: list[str]) -> ShardCheck:
    """A listed shard against its own content record and the sidecar's sha256."""
    p = rec["path"]
    f = inside(workdir, p, where)
    check = ShardCheck(p, feeds, rows=rec.get("rows"), sidecar_sha256=rec.get("sha256"))
    if not f.exists():
        integrity.append(f"{p} is missing")
        check.status = "missing"
        return check
    damage, check.sha256 = shard_check(f)
    if damage:  # the shard against its own record: a sidecar may have recorded a damaged shard
        check.damage = list(damage)
        integrity.append(f"{p} is damaged: {'; '.join(damage)}")
        check.status = f"damaged ({'; '.join(damage)})"
    elif check.sha256 != rec.get("sha256"):
        integrity.append(f"{p}: file sha256 differs from the sidecar's")
        check.status = "sha256 differs from the sidecar"
    return check


def _shard_provenance(check: ShardCheck, f: Path, pv: dict, workdir: Path, column: str, max_rows: int,
                      configfiles: list[str], integrity: list[str]) -> None:
    """Fill in a feeding shard's provenance and first rows."""
    p = check.path
    if f.exists() and max_rows:
        try:
            t = pq.read_table(f)
            keys = [c for c in TRACE_KEYS if c in t.column_names]
            if column in t.column_names and column not in keys:
                keys.append(column)
            check.sample = t.select(keys).slice(0, max_rows).to_pylist() if keys else []
            check.sample_more = max(t.num_rows - max_rows, 0)
        except Exception as e:  # noqa: BLE001 - an unreadable shard is itself a finding
            check.unreadable = str(e)
            integrity.append(f"{p}: unreadable ({e})")
            if not check.damage:  # a shard that fails its record keeps that status: the cause, whichever byte broke
                check.status = f"unreadable ({e})"
    fam = SHARD_FAMILIES[shard_family(p)]
    check.job, check.model, check.layer = pv.get("job"), pv.get("model"), pv.get("layer")
    check.code, check.params = pv.get("code", {}), pv.get("params", {})
    check.seeds = pv.get("seed_scheme") or JOBS[fam.job].seed_scheme
    if "samples" in pv:
        check.seeds += f"; samples {pv['samples']}"
    check.rule = rule_of(workdir, p) or fam.job
    check.rebuild = _cmd(check.rule, p, configfiles)


def source_text(manifest_source: dict) -> str:
    """Where a store's model came from, in words: package + version, hub repo @ revision, or a local path."""
    s = manifest_source or {}
    t = s.get("type")
    if t == "pypi" or s.get("package"):
        return f"package {s.get('package')} {s.get('version', '')}".strip()
    if t == "hf" or s.get("repo_id"):
        return f"hub {s.get('repo_id')} @ {s.get('revision') or s.get('commit') or '?'}"
    if t == "local":
        return f"local {s.get('path')}"
    return json.dumps(s, sort_keys=True)


def _check_store(workdir: Path, m: str, shards: list[str], provs: dict, where: str, inputs: Inputs,
                 integrity: list[str]) -> None:
    """A model's tensor store against its manifest, and the tensors its feeding shards record."""
    sdir = workdir / layout.tensors_dir(model_name(m, where))
    mpath = sdir / "manifest.json"
    if not mpath.exists():
        integrity.append(f"{m}: tensor store missing")
        inputs.stores.append(StoreCheck(m, str(sdir.relative_to(workdir)), "missing"))
        return
    manifest = json.loads(mpath.read_text())
    store_file = sdir / "tensors.safetensors"
    sha = sha256_file(store_file) if store_file.exists() else None
    same = sha == manifest.get("store_sha256")
    if not same:
        integrity.append(f"{m}: {store_file.name} sha256 differs from its manifest")
    inputs.stores.append(StoreCheck(
        m, str(store_file.relative_to(workdir)), "ok" if same else "sha256 differs from the manifest",
        source=source_text(manifest.get("source", {})), sha256=sha, manifest_sha256=sha256_file(mpath),
        adapter=manifest.get("adapter"), format=manifest.get("format"), headgeom=manifest.get("headgeom_version"),
        files=list(manifest.get("files", [])), shards=list(shards)))
    seen: dict[str, TensorCheck] = {}
    for p in shards:
        pv = provs[p]
        src_rec = (pv.get("model_source") or {}).get("store_sha256")
        if src_rec and src_rec != manifest.get("store_sha256"):
            integrity.append(f"{p}: computed from another store (store sha256 {src_rec[:16]}…)")
            inputs.stores.append(StoreCheck(m, p, f"computed from another store ({src_rec[:16]}…)",
                                            computed_from=src_rec))
        for k, s, status in verify_tensors(pv, manifest):
            if k in seen:
                seen[k].shards += 1
                continue
            entry = manifest["tensors"].get(k, {})
            seen[k] = TensorCheck(m, k, s, 1, "ok" if status == "matches manifest" else status, first_shard=p,
                                  source_dtype=entry.get("source_dtype", ""), dtype=entry.get("dtype", ""),
                                  shape=entry.get("shape", ""))
            inputs.tensors.append(seen[k])
            if status != "matches manifest":
                integrity.append(f"{p}: tensor {k} {status}")


def _recompute(value: str, what: str, make_csv, filters: dict, column: str, where: str) -> Recompute:
    """Rebuild the table (``make_csv()`` returns its CSV) and compare its cell with the table's."""
    try:
        cols, rows = read_csv(make_csv())
        v = rows[select_row(cols, rows, filters, where=where)].get(column, "")
        ok, how = compare(value, v)
    except DamagedFileError as e:
        v, ok, how = "", False, f"{DAMAGED_INPUT}: {e}"
    except Exception as e:  # noqa: BLE001 - a shard or tensor that cannot be used is a finding
        v, ok, how = "", False, f"could not recompute: {type(e).__name__}: {e}"
    return Recompute(what, v, ok, how)


def damaged_inputs(inputs: Inputs) -> list[str]:
    """The inputs that fail their own checks (one word each: the path and what failed): a shard
    missing, damaged by its content record or unreadable, a tensor store whose file differs from
    its manifest, a tensor a shard records that differs from the manifest. A shard that is sound
    but not the one the sidecar recorded is not damage: the table and its shards disagree."""
    bad = [f"{s.path} ({s.status})" for s in inputs.shards
           if s.status == "missing" or s.damage or s.unreadable is not None]
    bad += [f"{st.path} ({st.status})" for st in inputs.stores if st.status != "ok" and not st.computed_from]
    bad += [f"tensor {t.tensor} of {t.model} ({t.status})" for t in inputs.tensors if t.status != "ok"]
    return bad


def verdict_sentence(ok: bool, nan: bool, tensors: bool, damaged: list[str] = ()) -> str:
    if damaged:
        one = len(damaged) == 1
        return (f"DAMAGED — {len(damaged)} input{'' if one else 's'} of this number "
                f"{'fails its' if one else 'fail their'} own checks (FAILED above): "
                f"{'; '.join(damaged[:3])}{' …' if len(damaged) > 3 else ''}; rebuild "
                f"{'it' if one else 'them'} before trusting the number")
    if nan:
        return ("NaN — the table's value is NaN (undefined) and recomputes as NaN"
                + (" from its shards and from the tensors" if tensors else " from its shards")
                + "; the undefined value is reproduced, but there is no number to compare")
    if ok:
        return "MATCH — the number is reproduced from its shards" + (" and from the tensors" if tensors else "")
    return "MISMATCH — see above"


def audit(workdir, table: str, row: list[str] | dict, column: str, *, tensors: bool = True,
          configfiles: list[str] = (), tmpdir=None, max_rows: int = 5, find_rows: bool = True,
          progress=None) -> AuditReport:
    """Check and recompute one cell; prints nothing. ``row``: KEY=VALUE strings or a dict;
    ``tensors``: also recompute from the tensor store; ``max_rows``: first rows kept per feeding
    shard; ``find_rows``: look for the shard rows and columns the number moves with (the short and
    JSON views show them; the builder is rerun for up to PERTURB_BUDGET_S); ``progress``: called with
    a line per shard recomputed from the tensors. AuditError when the number cannot be found."""
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

    # which shards feed this row: those of the row's model when the table is per model
    row_model = rows[i].get("model")
    provs = {rec["path"]: rec.get("provenance", {}) for rec in agg.inputs}
    per_model = bool(row_model and row_model in {p.get("model") for p in provs.values()})
    if per_model:
        contributing = [rec["path"] for rec in agg.inputs if rec.get("provenance", {}).get("model") == row_model]
        sub_models = [row_model]
        why = f"model = {row_model}"
    else:
        contributing = [rec["path"] for rec in agg.inputs]
        sub_models = list(agg.models)
        why = "all listed shards" if agg.inputs else "no shards (from the manifests alone)"
    feeding = set(contributing)

    inputs = Inputs()
    where = f"{prov_path.name}: input"
    for rec in agg.inputs:
        check = _check_shard(workdir, rec, where, rec["path"] in feeding, integrity)
        inputs.shards.append(check)
        if check.feeds:
            _shard_provenance(check, inside(workdir, rec["path"], where), rec.get("provenance", {}), workdir, column,
                              max_rows, configfiles, integrity)

    # the tensors behind the contributing shards
    by_model: OrderedDict[str, list[str]] = OrderedDict()
    for p in contributing:
        by_model.setdefault(provs[p].get("model"), []).append(p)
    for m in list(by_model) or sub_models:
        _check_store(workdir, m, by_model.get(m, []), provs, f"{prov_path.name}: shard provenance", inputs, integrity)
    if not contributing:
        for m in sub_models:
            mp = workdir / layout.manifest(m)
            if mp.exists():
                inputs.manifests.append({"path": str(mp.relative_to(workdir)), "sha256": sha256_file(mp)})

    recomputed: list[str] = []
    clock = [time.perf_counter()]

    def recomputed_one(p: str) -> None:
        recomputed.append(p)
        now = time.perf_counter()
        if progress:
            progress(f"shard {len(recomputed)} of {len(contributing)} recomputed from the tensors: {p} "
                     f"({now - clock[0]:.1f} s)")
        clock[0] = now

    tmp_owner = None
    if tmpdir is None:
        tmp_owner = tmpdir = tempfile.mkdtemp(prefix="headgeom-audit-")
    tmp = Path(tmpdir)
    try:
        # (a) from the shards, exactly as listed
        from_shards = _recompute(value, f"from the {len(agg.inputs)} listed shards",
                                 lambda: rebuild_table(agg, workdir, tmp / "from_shards"),
                                 filters, column, f"{name} recomputed from the shards")
        # (b) from the tensors: recompute the contributing shards, aggregate them
        from_tensors = None
        if tensors:
            root = tmp / "from_tensors"
            sub_groups = OrderedDict((key, [p for p in ps if p in feeding]) for key, ps in agg.groups.items())

            def make():
                clock[0] = time.perf_counter()
                recompute_shards(contributing, provs, workdir, root, on_shard=recomputed_one)
                return rebuild_table(agg, workdir, tmp / "from_tensors_table", root, groups=sub_groups,
                                     models=sub_models)

            from_tensors = _recompute(value, f"from the tensors ({len(contributing)} shards recomputed, models "
                                             f"{', '.join(sub_models)})", make, filters, column,
                                      f"{name} recomputed from the tensors")
    finally:
        if tmp_owner:
            shutil.rmtree(tmp_owner, ignore_errors=True)
    ok = from_shards.ok and (from_tensors is None or from_tensors.ok) and not integrity
    nan = ok and from_shards.how == NAN_BOTH
    verdict = verdict_sentence(ok, nan, tensors, damaged_inputs(inputs))

    rows_behind = None
    if find_rows:
        try:
            rows_behind = feeding_rows(agg, workdir, row_model if per_model else None, filters, column, feeding)
        except Exception as e:  # noqa: BLE001 - e.g. an unreadable shard: already an integrity problem
            rows_behind = {"error": f"{type(e).__name__}: {e}"}
    return AuditReport(
        number=Number(name, csv_rel, filters, column, value),
        rows=rows_behind,
        rule=Rule(rule, _cmd(rule, csv_rel, configfiles)),
        builder=Builder(agg.function, sidecar.get("aggregation"), agg.models, why, dict(agg.params)),
        code=code_report(sidecar.get("code", {}), [provs[p].get("code", {}) for p in contributing]),
        config=merged_config(agg.params, [provs[p] for p in contributing]),
        inputs=inputs,
        verdicts=Verdicts(from_shards, from_tensors, recomputed),
        integrity=integrity,
        verdict=verdict.split(" — ")[0],
        verdict_text=verdict,
        ok=ok,
        nan=nan,
    )
