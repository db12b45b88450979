"""The sensitivity of the claims ledger to the reconstructed choices (*(choice)*,
docs/methods.md): for each switch and each alternative, which ledger claims change status.

The ``choices:`` switches of paper 1 (headgeom.outputs.choices: column selection in the
``paper1_heads`` shards) are evaluated by rebuilding every table reading those shards with the
alternative.

Choices that are table params elsewhere in the config (``TABLE_SWITCHES``: paper 1's left-zero
band membership and its threshold τ) are evaluated the same way: the tables taking that param are
rebuilt with each alternative value.

Choices of the activation stage's per-layer analysis jobs (``SHARD_SWITCHES``: the natural-return
endpoint, ``activation.paper1.endpoint`` pooled / median_cos2; the norm epsilon in J(x),
``activation.read_paths.eps_exact``) change shards, not tables: for each alternative those shards
are recomputed into a temporary directory from the stored forward-pass activations their
provenance names (headgeom.verify.audit.recompute_shards, the job's own code), and the tables
reading them rebuilt from the recomputed shards. No forward pass is rerun for them. Window cutting
(``FORWARD_SWITCHES``: ``activation.bos``, a BOS prepended to every window or not; the consecutive
non-overlapping cut itself has no alternative implemented) changes the forward pass: each forward
pass behind the activation shards is rerun with the alternative into a temporary workdir (the run's
tensor store linked in; model and corpus entries from the config), and every activation shard is
recomputed from it.

``sensitivity(workdir, ledger, models)`` rebuilds, for every alternative, the tables that read
what it switches from the shards their provenance sidecars list (headgeom.verify.audit.rebuild_table), beside
copies of every other table, evaluates the ledger on both sets (headgeom.verify.claims) and
reports each claim whose status differs."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from headgeom import layout
from headgeom.jobs.activation import FORWARD_SUMMARY, forward_job
from headgeom.jobs.families import FORWARD
from headgeom.core.provenance import code_version
from headgeom.io.files import sha256_file, write_set, write_text
from headgeom.outputs import TABLES
from headgeom.outputs.choices import DEFAULTS, SWITCHES
from headgeom.outputs.formats import Column, Table
from headgeom.verify import audit
from headgeom.verify.claims import build_rows, load_ledger


@dataclass(frozen=True)
class TableSwitch:
    """A reconstructed choice that table builders take as a param: evaluated by rebuilding them.
    The tables taking it are the registered outputs whose declared params hold its config key."""
    key: str  # config key, dotted
    values: tuple  # values tried (the configured one, read from the table's sidecar, is skipped)
    method: str
    fallback: object = None  # the builder's default, for a sidecar written before the param existed

    def _takers(self) -> list[tuple[str, tuple]]:
        """(table, where the key sits in its params) for every table declaring a param above the key."""
        parts = tuple(self.key.split("."))
        out = []
        for name, t in TABLES.items():
            for pname, dpath in t.params.items():
                d = tuple(dpath.split("/"))
                if parts[:len(d)] == d:
                    out.append((name, (pname, *parts[len(d):])))
        return out

    @property
    def tables(self) -> tuple:
        return tuple(n for n, _ in self._takers())

    @property
    def param(self) -> tuple:
        where = {p for _, p in self._takers()}
        if len(where) != 1:
            raise ValueError(f"choice {self.key!r}: the tables taking it place it at {sorted(where)}")
        return where.pop()


@dataclass(frozen=True)
class ShardSwitch:
    """A reconstructed choice of a per-layer analysis job: evaluated by recomputing its shards
    (from stored inputs, with the job's own code) and rebuilding the tables reading them."""
    key: str
    values: tuple
    method: str
    family: str  # shard family recomputed
    job_param: str  # the job's param
    table_param: str | None = None  # the same value as a param of the tables reading the family
    fallback: object = None  # the job's default (no shards: the alternatives are the other values)


TABLE_SWITCHES = (
    TableSwitch("paper1.band.membership", ("explanation", "strong"),
                "paper 1 left-zero band membership (P_iP_j ≈ P_i both ways, or both heads strong)", "explanation"),
    TableSwitch("paper1.band.explanation", (0.8, 0.85, 0.9, 0.95),
                "paper 1 left-zero band: τ of ≈ (F_ij and F_ji ≥ τ)", 0.9),
)
SHARD_SWITCHES = (
    ShardSwitch("activation.paper1.endpoint", ("pooled", "median_cos2"), "methods §3 natural-return endpoint",
                "activation_natural_return", "endpoint", "endpoint", "pooled"),
    ShardSwitch("activation.read_paths.eps_exact", (True, False), "methods §3 norm epsilon in J(x)",
                "activation_read_paths", "eps_exact", fallback=True),
)


@dataclass(frozen=True)
class ForwardSwitch:
    """A reconstructed choice of the forward pass (how windows are cut): evaluated by rerunning the
    forward passes the activation shards were computed from with the alternative, into a temporary
    directory, then recomputing every activation shard from them and rebuilding their tables."""
    key: str  # config key, dotted
    values: tuple
    method: str
    param: str  # the forward job's param
    fallback: object = None


FORWARD_SWITCHES = (
    ForwardSwitch("activation.bos", (True, False), "methods §3 window cutting (BOS prepended to every window)",
                  "bos", True),
)
ACTIVATION_FAMILIES = ("activation_natural_return", "activation_read_paths")


# ------------------------------------------------------------------ sensitivity


def _choice_tables() -> list[str]:
    """Tables whose builder reads the paper1_heads shards (and so the switched columns)."""
    return _family_tables("paper1_heads")


def _family_tables(family: str) -> list[str]:
    return [n for n, o in TABLES.items() if family in o.families]


def affected_tables() -> list[str]:
    """Every table some switch rebuilds (the rule's inputs are their sidecars)."""
    names = _choice_tables() + [t for sw in TABLE_SWITCHES for t in sw.tables]
    names += [t for sw in SHARD_SWITCHES for t in _family_tables(sw.family)]
    return list(dict.fromkeys(names))


def _get(d: dict, path: tuple):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _set(d: dict, path: tuple, value) -> dict:
    out = dict(d)
    if len(path) == 1:
        out[path[0]] = value
    else:
        out[path[0]] = _set(dict(out.get(path[0]) or {}), path[1:], value)
    return out


def _fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _agg(workdir: Path, tables_dir: Path, name: str, only=None):
    """The aggregation behind table ``name`` (None when it is not built, or not one of ``only``:
    the tables of this run, so that a table left by an earlier run of other models is ignored)."""
    prov = tables_dir / f"{name}.prov.json"
    if (only is not None and name not in only) or not prov.exists():
        return None
    sidecar = audit.load_sidecar(prov, workdir)
    _, rows = audit.read_csv(tables_dir / f"{name}.csv")
    return audit.aggregation_from_sidecar(name, sidecar, rows)


def _build(workdir: Path, agg, out_dir: Path, params: dict, roots: dict | None = None) -> None:
    """Build ``agg``'s table into out_dir with ``params``; shards of a family in ``roots`` are read
    from that root (recomputed ones), the rest from the workdir."""
    audit.rebuild_table(agg, workdir, out_dir, roots=roots, params=params)


def _shard_records(aggs: list, families) -> dict[str, dict]:
    """{shard path: its provenance} for every shard of ``families`` the tables read."""
    return {rec["path"]: rec.get("provenance") or {} for agg in aggs for rec in agg.inputs
            if any(rec["path"] in agg.groups.get(f, []) for f in families)}


def _recompute(workdir: Path, recs: dict[str, dict], root: Path, params: dict | None = None) -> None:
    """Recompute the shards ``recs`` ({path: provenance}) from ``workdir``'s inputs into
    root/<same relative path>, with ``params`` overriding the job params their provenance records."""
    if params:
        recs = {p: {**prov, "params": {**(prov.get("params") or {}), **params}} for p, prov in recs.items()}
    audit.recompute_shards(list(recs), recs, workdir, root, log=lambda *a, **k: None)


def _forward_dirs(aggs: list) -> dict[str, tuple[str, str]]:
    """results/activations/<model>/<corpus>/<n>x<w> -> (model, corpus) for every forward pass the
    activation shards these tables read were computed from (their provenance)."""
    return {audit.activations_dir(prov.get("model"), prov): (prov.get("model"), (prov.get("activations") or {}).get("corpus"))
            for prov in _shard_records(aggs, ACTIVATION_FAMILIES).values()}


def _rerun_forward(workdir: Path, aggs: list, sw: ForwardSwitch, value, sources: dict, tmp: Path) -> Path:
    """Rerun every forward pass behind ``aggs`` with the forward param set to ``value`` into a
    scratch workdir (tmp/work, the run's tensor store linked in); return that workdir."""
    work = tmp / "work"
    (work / layout.TENSORS_ROOT).parent.mkdir(parents=True)
    (work / layout.TENSORS_ROOT).symlink_to((workdir / layout.TENSORS_ROOT).resolve(), target_is_directory=True)
    for rel, (model, corpus) in _forward_dirs(aggs).items():
        summary = json.loads((audit.inside(workdir, rel, "activations of the shard") / FORWARD_SUMMARY).read_text())
        entry = (sources.get("models") or {}).get(model)
        corpus_entry = (sources.get("texts") or {}).get(corpus)
        if entry is None or corpus_entry is None:
            raise NotEvaluated(f"the config entries of model {model!r} and corpus {corpus!r} (to rerun the forward "
                               f"pass {rel}) were not given")
        params = {**summary.get("params", {}), sw.param: value}
        forward_job(model, entry, workdir / layout.tensors_dir(model), corpus, corpus_entry, work / rel, params,
                    log=lambda *a, **k: None, step=FORWARD.name)
    return work


class NotEvaluated(Exception):
    """An alternative that cannot be evaluated with what the run has: its row says why."""


def _others(values, default) -> list:
    """The values of a switch other than the run's own (all of them when it is unknown)."""
    return [v for v in values if default is None or _fmt(v) != _fmt(default)]


def _shown(default) -> str:
    return "–" if default is None else _fmt(default)


def _alternatives(workdir: Path, tables_dir: Path, sources: dict | None = None, only=None):
    """(switch, where, default, alternative, build(out_dir) -> tables rebuilt) for every alternative
    (``only``: the tables of this run; None = every table found)."""
    heads_tables = _choice_tables()
    for sw in SWITCHES:
        for alt in sw.alternatives[1:]:
            def build(tmp, sw=sw, alt=alt):
                built = []
                for n in heads_tables:
                    agg = _agg(workdir, tables_dir, n, only)
                    if agg is not None:
                        _build(workdir, agg, tmp, {**agg.params, "choices": {**DEFAULTS, sw.key: alt}})
                        built.append(n)
                return built
            yield f"choices.{sw.key}", sw.method, sw.default, alt, build
    for sw in TABLE_SWITCHES:
        aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in sw.tables) if a is not None]
        default = next((_get(a.params, sw.param) for a in aggs if _get(a.params, sw.param) is not None), sw.fallback)
        for alt in _others(sw.values, default):
            def build(tmp, sw=sw, alt=alt, aggs=aggs):
                for agg in aggs:
                    _build(workdir, agg, tmp, _set(agg.params, sw.param, alt))
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build
    for sw in SHARD_SWITCHES:
        aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in _family_tables(sw.family)) if a is not None]
        aggs = [a for a in aggs if a.groups.get(sw.family)]
        default = next((_get(prov, ("params", sw.job_param)) for prov in _shard_records(aggs, (sw.family,)).values()),
                       sw.fallback)
        for alt in _others(sw.values, default):
            def build(tmp, sw=sw, alt=alt, aggs=aggs):
                if not aggs:
                    return []
                root = tmp / "recomputed"
                _recompute(workdir, _shard_records(aggs, (sw.family,)), root, {sw.job_param: alt})
                for agg in aggs:
                    params = _set(agg.params, (sw.table_param,), alt) if sw.table_param else dict(agg.params)
                    _build(workdir, agg, tmp, params, {sw.family: root})
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build
    act_tables = list(dict.fromkeys(t for f in ACTIVATION_FAMILIES for t in _family_tables(f)))
    aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in act_tables) if a is not None]
    aggs = [a for a in aggs if any(a.groups.get(f) for f in ACTIVATION_FAMILIES)]
    for sw in FORWARD_SWITCHES:
        defaults = {_get(_forward_params(workdir, rel), (sw.param,)) for rel in _forward_dirs(aggs)}
        default = defaults.pop() if len(defaults) == 1 else None
        default = sw.fallback if default is None else default
        for alt in _others(sw.values, default):
            def build(tmp, sw=sw, alt=alt, aggs=aggs):
                if not aggs:
                    return []
                if sources is None:  # a caller without the config's entries: listed, not evaluated
                    raise NotEvaluated("the config's models: and texts: entries were not given")
                work = _rerun_forward(workdir, aggs, sw, alt, sources, tmp)
                root = tmp / "recomputed"
                _recompute(work, _shard_records(aggs, ACTIVATION_FAMILIES), root)
                for agg in aggs:
                    _build(workdir, agg, tmp, dict(agg.params), {f: root for f in ACTIVATION_FAMILIES})
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build


def _forward_params(workdir: Path, rel: str) -> dict:
    p = workdir / rel / FORWARD_SUMMARY
    return json.loads(p.read_text()).get("params", {}) if p.exists() else {}


def _evaluate(workdir: Path, tables_dir: Path, sources, ledger, models_run, base: dict, only, i: int) -> dict:
    """The row of alternative ``i`` of ``_alternatives`` (its tables rebuilt in a temporary
    directory beside copies of every other table, the ledger re-read there)."""
    key, where, default, alt, build = next(x for j, x in enumerate(_alternatives(workdir, tables_dir, sources, only))
                                           if j == i)
    with tempfile.TemporaryDirectory(prefix="headgeom-choices-") as tmp:
        tmp = Path(tmp)
        for f in tables_dir.iterdir():
            if f.suffix in (".csv", ".md") and f.is_file():
                shutil.copyfile(f, tmp / f.name)
        try:
            built = build(tmp)
        except NotEvaluated as why:
            return {"switch": key, "default": default, "alternative": _fmt(alt), "where": where, "tables": 0,
                    "claims_read": None, "claims_judged": None, "changed": None, "claims": f"not evaluated: {why}"}
        alt_rows = {r["id"]: r for r in build_rows(ledger, tmp, models_run)[0]}
    read = [i for i, r in base.items() if r["read"].split("[")[0].split(":")[0] in built]
    judged = [i for i in read if base[i]["status"] in ("agrees", "differs")]
    changed = [i for i in base if i in alt_rows and alt_rows[i]["status"] != base[i]["status"]]
    return {
        "switch": key, "default": default, "alternative": _fmt(alt), "where": where,
        "tables": len(built), "claims_read": len(read), "claims_judged": len(judged), "changed": len(changed),
        "claims": "; ".join(f"{i}: {base[i]['status']} → {alt_rows[i]['status']} "
                            f"({base[i]['pipeline']} → {alt_rows[i]['pipeline']})" for i in changed) or "none",
    }


def sensitivity(workdir, ledger: list[dict], models_run: list[str], tables_dir=None, sources: dict | None = None,
                workers: int = 1, tables=None, progress=None) -> Table:
    """``sources``: the config's ``models:`` and ``texts:`` entries (``{"models": ..., "texts": ...}``),
    which the forward switches need to rerun forward passes (an alternative whose entries are
    missing gets a row saying so). ``tables``: the tables this run builds (None = every table in
    tables_dir); a table left in the directory by an earlier run of other models is not rebuilt.
    ``workers`` > 1 evaluates the alternatives in that many processes (each is independent; rows
    keep their order). ``progress(line)`` gets a line as each alternative ends."""
    workdir = Path(workdir)
    tables_dir = Path(tables_dir or workdir / layout.TABLES_DIR)
    base = {r["id"]: r for r in build_rows(ledger, tables_dir, models_run)[0]}
    only = None if tables is None else set(tables)
    n = sum(1 for _ in _alternatives(workdir, tables_dir, sources, only))
    one = partial(_evaluate, workdir, tables_dir, sources, ledger, models_run, base, only)
    rows = []
    for row in _rows(one, n, workers):
        rows.append(row)
        _progress(progress, len(rows), n, row)
    return Table("choice_sensitivity",
                 "For each switch of a reconstructed choice and each alternative: the tables rebuilt, the ledger claims "
                 "they feed, and every claim whose status changes (status and pipeline value, default → alternative).",
                 [Column("switch", "Switch"), Column("default", "Default"), Column("alternative", "Alternative"),
                  Column("where", "Choice"), Column("tables", "Tables rebuilt"), Column("claims_read", "Claims read"),
                  Column("claims_judged", "of them agreeing or differing"),
                  Column("changed", "Claims changing status"), Column("claims", "Changes")], rows,
                 notes=f"Run models: {', '.join(models_run) or 'none'}. Tables are rebuilt from the shards their "
                       "provenance lists; defaults are the run's (config choices:, paper1.band, and the activation "
                       "jobs' params). Activation switches recompute the analysis shards from the stored "
                       "forward-pass activations; the window-cutting switch reruns the forward passes (into a "
                       "temporary directory) and then recomputes every activation shard.")


def _rows(one, n: int, workers: int):
    """one(0), ..., one(n - 1) in order; in ``workers`` processes when there are several."""
    if workers > 1 and n > 1:
        # fork: the rule's script runs as __main__, which a spawned worker would execute again
        with multiprocessing.get_context("fork").Pool(min(workers, n)) as pool:
            yield from pool.imap(one, range(n), chunksize=1)
    else:
        yield from map(one, range(n))


def _progress(progress, done: int, n: int, row: dict) -> None:
    if progress is not None:
        changed = "not evaluated" if row["changed"] is None else f"{row['changed']} claims change status"
        progress(f"[choice_sensitivity] {done}/{n} {row['switch']} = {row['alternative']}: {changed}")


def sensitivity_job(ledger_path, workdir, models_run: list[str], outputs: dict, sources: dict | None = None,
                    workers: int = 1, tables=None, progress=None) -> Table:
    t = sensitivity(workdir, load_ledger(ledger_path), models_run, sources=sources, workers=workers, tables=tables,
                    progress=progress)
    if "html" in outputs:  # the report's view of the table; not in the sidecar (as the registry's tables)
        write_text(outputs["html"], t.html())
    write_set(outputs, {"csv": t.csv(), "md": t.markdown(), "tex": t.latex()}, {
        "table": t.name, "aggregation": "headgeom.verify.sensitivity.sensitivity",
        "params": {"models": list(models_run), "switches": {
            **{f"choices.{s.key}": list(s.alternatives) for s in SWITCHES},
            **{s.key: list(s.values) for s in (*TABLE_SWITCHES, *SHARD_SWITCHES, *FORWARD_SWITCHES)}}},
        "code": code_version(), "columns": [c.key for c in t.columns],
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path)},
        "inputs": [],
    })
    return t
