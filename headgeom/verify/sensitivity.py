"""The sensitivity of the claims ledger to the reconstructed choices (*(choice)*,
docs/methods.md): for each switch and each alternative, which ledger claims change status.

The switches and what each can change are declared once, in headgeom.outputs.choices:

* the ``choices:`` switches of paper 1 (column selection in the ``paper1_heads`` shards) and the
  table params ``TABLE_SWITCHES`` (paper 1's left-zero band membership and its threshold τ)
  rebuild the tables taking them from the run's own shards (kind ``tables``);
* ``SHARD_SWITCHES`` of the activation stage's per-layer analysis jobs (the natural-return
  endpoint ``activation.paper1.endpoint``; the norm epsilon in J(x),
  ``activation.read_paths.eps_exact``) recompute that one shard family from the stored
  forward-pass activations their provenance names (headgeom.verify.audit.recompute_shards, the
  job's own code), then rebuild the tables reading it; no forward pass is rerun for them (kind
  ``shards``);
* window cutting, ``FORWARD_SWITCHES`` (``activation.bos``: a BOS prepended to every window or not;
  the consecutive non-overlapping cut itself has no alternative implemented), reruns each forward
  pass behind the activation shards with the alternative (one per model, corpus and window shape,
  shared by every family read from it), then recomputes every activation shard from those (kind
  ``forward``).

In the workflow (workflow/rules/sensitivity.smk) every alternative is a job of its own
(``planned``: the alternatives of a config, from the registry): ``sensitivity_tables`` /
``sensitivity_shards`` write the alternative's row (``alternative_job``) into
results/sensitivity/<switch>=<value>/row.json, recomputed shards beside it at the run's relative
paths; ``sensitivity_forward`` reruns one forward pass there (``forward_alternative_job``); the
local rule ``choice_sensitivity`` aggregates the rows (``aggregate_job``).

``sensitivity(workdir, ledger, models)`` evaluates every alternative in one process (temporary
directories): the same rows. Either way an alternative's tables are rebuilt from the shards their
provenance sidecars list (headgeom.verify.audit.rebuild_table) beside copies of every other
table, the ledger is evaluated on both sets (headgeom.verify.claims) and each claim whose status
differs is reported."""

from __future__ import annotations

import json
import math
import multiprocessing
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import ConfigError, DamagedFileError
from headgeom.jobs.activation import FORWARD_SUMMARY, forward_job, windows_job
from headgeom.schedule.families import SHARD_FAMILIES, FORWARD, JOBS, forward_shapes
from headgeom.core.provenance import code_version
from headgeom.io.files import recorded_json, sha256_file, write_recorded_json, write_set, write_text
from headgeom.io.shards import rebuild_hint
from headgeom.outputs import TABLES
from headgeom.outputs.registry import HEADS
from headgeom.outputs.choices import (  # noqa: F401 (the switch types, re-exported for callers)
    ACTIVATION_FAMILIES,
    DEFAULTS,
    FORWARD_SWITCHES,
    SHARD_SWITCHES,
    SWITCHES,
    TABLE_SWITCHES,
    ForwardSwitch,
    ShardSwitch,
    TableSwitch,
)
from headgeom.outputs.formats import Column, Table
from headgeom.verify import audit
from headgeom.verify.claims import build_rows, load_ledger


# ------------------------------------------------------------------ sensitivity


KINDS = ("tables", "shards", "forward")  # what an alternative recomputes (headgeom.outputs.choices)


def _choice_tables() -> list[str]:
    """Tables whose builder reads the paper1_heads shards (and so the switched columns)."""
    return _family_tables("paper1_heads")


def _family_tables(family: str) -> list[str]:
    return [n for n, o in TABLES.items() if family in o.families]


def _activation_tables() -> list[str]:
    return list(dict.fromkeys(t for f in ACTIVATION_FAMILIES for t in _family_tables(f)))


def affected_tables() -> list[str]:
    """Every table some switch rebuilds (the rules' inputs are their sidecars)."""
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


def alternative_id(switch: str, value) -> str:
    """An alternative's name (its directory under results/sensitivity): ``<switch>=<value>``."""
    return f"{switch}={_fmt(value)}"


# ------------------------------------------------------------------ the alternatives of a config


@dataclass(frozen=True)
class Alternative:
    """One alternative of one switch, as the workflow schedules it (one job)."""
    switch: str  # the table's switch column: choices.<key>, or the dotted config key
    value: object
    kind: str  # one of KINDS
    default: str  # the run's own value, as the table shows it
    tables: tuple  # the tables of this run it rebuilds
    families: tuple = ()  # the shard families it recomputes
    forwards: tuple = ()  # (model, corpus, n_windows, window): each forward pass it reruns

    @property
    def id(self) -> str:
        return alternative_id(self.switch, self.value)


def _forward_shapes(config: dict, model: str) -> list[tuple]:
    """The forward passes of one model (headgeom.schedule.families.forward_shapes), with the model."""
    return [(model, *shape) for shape in forward_shapes(config)]


def planned(config: dict, built, act_models=()) -> list[Alternative]:
    """Every alternative of every switch for a config, in the table's row order: ``built`` the
    tables the run builds, ``act_models`` the models its activation stage runs. The run's value
    of a switch (skipped) is the config's where the run builds a table the switch changes, else
    the builder's default, as ``sensitivity`` reads it from the run's sidecars and provenance."""
    built, out = set(built), []
    heads = tuple(t for t in _choice_tables() if t in built)
    for sw in SWITCHES:
        out += [Alternative(f"choices.{sw.key}", v, "tables", sw.default, heads) for v in sw.alternatives[1:]]
    for sw in TABLE_SWITCHES:
        tables = tuple(t for t in sw.tables if t in built)
        default = _get(config, tuple(sw.key.split("."))) if tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "tables", _shown(default), tables) for v in _others(sw.values, default)]
    for sw in SHARD_SWITCHES:
        tables = tuple(t for t in _family_tables(sw.family) if t in built) if act_models else ()
        default = _get(config, tuple(sw.key.split("."))) if tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "shards", _shown(default), tables, (sw.family,))
                for v in _others(sw.values, default)]
    act_tables = tuple(t for t in _activation_tables() if t in built) if act_models else ()
    forwards = tuple(f for m in act_models for f in _forward_shapes(config, m)) if act_tables else ()
    for sw in FORWARD_SWITCHES:
        default = _get(config, tuple(sw.key.split("."))) if act_tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "forward", _shown(default), act_tables, ACTIVATION_FAMILIES, forwards)
                for v in _others(sw.values, default)]
    return out


# one alternative's job when it rebuilds tables only (measured: a few seconds per table on 2 cores)
TABLES_COST = {"mem_mb": 2000, "runtime": 5}


def alternative_cost(alt: Alternative, manifests: dict, config: dict) -> dict:
    """mem_mb and runtime (minutes) of one alternative's job (``manifests``: model -> its manifest
    path or fields, for the models whose shards it recomputes). A table switch rebuilds tables
    (``TABLES_COST``); a shard or forward switch also recomputes its families' shards of every
    activation model in that one job, layer after layer: the per-layer jobs' own cost models
    (headgeom.schedule.families), summed; the forward passes are jobs of their own (the forward step's cost)."""
    from headgeom.schedule import designs
    from headgeom.schedule.families import SHARD_FAMILIES, JOBS

    mem, minutes = TABLES_COST["mem_mb"], float(TABLES_COST["runtime"])
    work_s = 60 * minutes  # the tables' rebuild: as requested (not modelled)
    if not (alt.families and alt.tables):
        return {"mem_mb": mem, "runtime": int(minutes), "work_s": work_s}
    for model, manifest in manifests.items():
        fields = manifest if isinstance(manifest, dict) else json.loads(Path(manifest).read_text())["fields"]
        for fam in alt.families:
            job = JOBS[SHARD_FAMILIES[fam].job]
            for layer in range(int(fields["n_layers"])):
                r = job.cost(fields, designs.model_config(config, model, layer), {"model": model, "layer": str(layer)})
                # the layers' work, not their jobs' runtime floors (one process does them all)
                mem, minutes = max(mem, int(r["mem_mb"])), minutes + float(r.get("work_min", r["runtime"]))
                work_s += float(r.get("work_s", 60 * r["runtime"]))
    if "activation_read_paths" in alt.families:  # what the process keeps of reader layers (keep_reader_terms)
        from headgeom.jobs.activation import READER_TERMS_MB

        mem += READER_TERMS_MB
    return {"mem_mb": mem, "runtime": int(math.ceil(minutes)), "work_s": work_s}


# ------------------------------------------------------------------ evaluating alternatives


def _agg(workdir: Path, tables_dir: Path, name: str, only=None):
    """The aggregation behind table ``name`` (None when it is not built, or not one of ``only``:
    the tables of this run, so that a table left by an earlier run of other models is ignored)."""
    prov = tables_dir / f"{name}.prov.json"
    if (only is not None and name not in only) or not prov.exists():
        return None
    sidecar = audit.load_sidecar(prov, workdir)
    _, rows = audit.read_csv(tables_dir / f"{name}.csv")
    return audit.aggregation_from_sidecar(name, sidecar, rows)


def _build(workdir: Path, agg, out_dir: Path, params: dict, say, roots: dict | None = None) -> None:
    """Build ``agg``'s table into out_dir with ``params``; shards of a family in ``roots`` are read
    from that root (recomputed ones), the rest from the workdir."""
    audit.rebuild_table(agg, workdir, out_dir, roots=roots, params=params)
    say(f"rebuilt table {agg.name}")


def _shard_records(aggs: list, families) -> dict[str, dict]:
    """{shard path: its provenance} for every shard of ``families`` the tables read."""
    return {rec["path"]: rec.get("provenance") or {} for agg in aggs for rec in agg.inputs
            if any(rec["path"] in agg.groups.get(f, []) for f in families)}


def unchanged_columns(families, changes: str) -> tuple:
    """The columns of ``families`` that read nothing of what a switch ``changes`` ("acts": the forward
    pass; else the job param's name), by their job's ``column_reads`` (headgeom.schedule.families): a
    recomputation takes them from the run's shard instead of computing them again, bit for bit the same."""
    cols = set()
    for f in families:
        reads = JOBS[SHARD_FAMILIES[f].job].column_reads or {}
        cols |= {c for c, r in reads.items() if changes not in r}
    return tuple(sorted(cols))


def _recompute(workdir: Path, recs: dict[str, dict], root: Path, say, params: dict | None = None,
               acts_root: Path | None = None, unchanged: tuple = ()) -> None:
    """Recompute the shards ``recs`` ({path: provenance}) from ``workdir``'s inputs (activations
    under ``acts_root``, default the workdir) into root/<same relative path>, with ``params``
    overriding the job params their provenance records; ``unchanged``: the columns the override
    cannot change (unchanged_columns), taken from the run's shards."""
    if params:
        recs = {p: {**prov, "params": {**(prov.get("params") or {}), **params}} for p, prov in recs.items()}
    n, done = len(recs), [0]

    def one(path):
        done[0] += 1
        say(f"shard {done[0]}/{n}: {path}")

    audit.recompute_shards(list(recs), recs, workdir, root, on_shard=one, acts_root=acts_root, unchanged=unchanged)


def _forward_dirs(aggs: list) -> dict[str, tuple[str, str]]:
    """results/activations/<model>/<corpus>/<n>x<w> -> (model, corpus) for every forward pass the
    activation shards these tables read were computed from (their provenance)."""
    return {audit.activations_dir(prov.get("model"), prov): (prov.get("model"), (prov.get("activations") or {}).get("corpus"))
            for prov in _shard_records(aggs, ACTIVATION_FAMILIES).values()}


def _forward_one(workdir: Path, rel: str, model: str, corpus: str, entry: dict, corpus_entry: dict,
                 sw: ForwardSwitch, value, out_dir, log) -> None:
    """Rerun the run's forward pass ``rel`` (its recorded params) with ``sw``'s param set to
    ``value`` into out_dir."""
    summary = json.loads((audit.inside(workdir, rel, "activations of the shard") / FORWARD_SUMMARY).read_text())
    params = {**summary.get("params", {}), sw.param: value}
    forward_job(model, entry, workdir / layout.tensors_dir(model), corpus, corpus_entry, out_dir, params, log=log,
                step=FORWARD.name)


def _rerun_forward(workdir: Path, aggs: list, sw: ForwardSwitch, value, sources: dict, root: Path, say) -> None:
    """Rerun every forward pass behind ``aggs`` with the forward param set to ``value`` into
    root/<the run's relative path>."""
    for rel, (model, corpus) in _forward_dirs(aggs).items():
        entry = (sources.get("models") or {}).get(model)
        corpus_entry = (sources.get("texts") or {}).get(corpus)
        if entry is None or corpus_entry is None:
            raise NotEvaluated(f"the config entries of model {model!r} and corpus {corpus!r} (to rerun the forward "
                               f"pass {rel}) were not given")
        _forward_one(workdir, rel, model, corpus, entry, corpus_entry, sw, value, root / rel,
                     log=lambda *a, **k: None)
        say(f"forward pass {rel} rerun")


class NotEvaluated(Exception):
    """An alternative that cannot be evaluated with what the run has: its row says why."""


def _reads_none_of(agg, columns) -> bool:
    """Whether table ``agg``'s builder read none of the paper1_heads ``columns`` when the run built
    it (its sidecar's columns_read; False when not recorded, or when the builder takes the choices
    themselves): a choices switch replaces only those columns (headgeom.outputs.choices.apply), so
    such a table is the same under every alternative, and the run's table is the alternative's."""
    import inspect

    read = (agg.columns_read or {}).get(HEADS)
    if read is None or "choices" in inspect.signature(TABLES[agg.name].build).parameters:
        return False
    return not set(read) & set(columns)


def _others(values, default) -> list:
    """The values of a switch other than the run's own (all of them when it is unknown)."""
    return [v for v in values if default is None or _fmt(v) != _fmt(default)]


def _shown(default) -> str:
    return "–" if default is None else _fmt(default)


def _alternatives(workdir: Path, tables_dir: Path, sources: dict | None = None, only=None, acts_root=None):
    """(switch, where, default, alternative, build(out_dir, root, say) -> tables rebuilt) for every
    alternative (``only``: the tables of this run; None = every table found). ``build`` writes
    recomputed shards into root/<the run's relative path>; a forward switch reads its rerun forward
    passes under ``acts_root`` when given (the workflow's jobs ran them), else reruns them into root
    (with the config entries in ``sources``)."""
    heads_tables = _choice_tables()
    for sw in SWITCHES:
        for alt in sw.alternatives[1:]:
            def build(tmp, root, say, sw=sw, alt=alt):
                built = []
                for n in heads_tables:
                    agg = _agg(workdir, tables_dir, n, only)
                    if agg is None:
                        continue
                    if _reads_none_of(agg, sw.columns):  # its copy in tmp is the alternative's table
                        say(f"table {n} kept: its builder read none of {', '.join(sw.columns)}")
                    else:
                        _build(workdir, agg, tmp, {**agg.params, "choices": {**DEFAULTS, sw.key: alt}}, say)
                    built.append(n)
                return built
            yield f"choices.{sw.key}", sw.method, sw.default, alt, build
    for sw in TABLE_SWITCHES:
        aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in sw.tables) if a is not None]
        default = next((_get(a.params, sw.param) for a in aggs if _get(a.params, sw.param) is not None), sw.fallback)
        for alt in _others(sw.values, default):
            def build(tmp, root, say, sw=sw, alt=alt, aggs=aggs):
                for agg in aggs:
                    _build(workdir, agg, tmp, _set(agg.params, sw.param, alt), say)
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build
    for sw in SHARD_SWITCHES:
        aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in _family_tables(sw.family)) if a is not None]
        aggs = [a for a in aggs if a.groups.get(sw.family)]
        default = next((_get(prov, ("params", sw.job_param)) for prov in _shard_records(aggs, (sw.family,)).values()),
                       sw.fallback)
        for alt in _others(sw.values, default):
            def build(tmp, root, say, sw=sw, alt=alt, aggs=aggs):
                if not aggs:
                    return []
                _recompute(workdir, _shard_records(aggs, (sw.family,)), root, say, {sw.job_param: alt},
                           unchanged=unchanged_columns((sw.family,), sw.job_param))
                for agg in aggs:
                    params = _set(agg.params, (sw.table_param,), alt) if sw.table_param else dict(agg.params)
                    _build(workdir, agg, tmp, params, say, {sw.family: root})
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build
    aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in _activation_tables()) if a is not None]
    aggs = [a for a in aggs if any(a.groups.get(f) for f in ACTIVATION_FAMILIES)]
    for sw in FORWARD_SWITCHES:
        defaults = {_get(_forward_params(workdir, rel), (sw.param,)) for rel in _forward_dirs(aggs)}
        default = defaults.pop() if len(defaults) == 1 else None
        default = sw.fallback if default is None else default
        for alt in _others(sw.values, default):
            def build(tmp, root, say, sw=sw, alt=alt, aggs=aggs):
                if not aggs:
                    return []
                if acts_root is not None:  # the workflow's sensitivity_forward jobs ran them
                    acts = Path(acts_root)
                    missing = [rel for rel in _forward_dirs(aggs) if not (acts / rel / FORWARD_SUMMARY).is_file()]
                    if missing:
                        raise ConfigError(f"choice sensitivity {alternative_id(sw.key, alt)}: no rerun forward pass "
                                          f"{', '.join(missing)} under {acts} (the activation shards name it)")
                elif sources is None:  # a caller without the config's entries: listed, not evaluated
                    raise NotEvaluated("the config's models: and texts: entries were not given")
                else:
                    _rerun_forward(workdir, aggs, sw, alt, sources, root, say)
                    acts = root
                _recompute(workdir, _shard_records(aggs, ACTIVATION_FAMILIES), root, say, acts_root=acts,
                           unchanged=unchanged_columns(ACTIVATION_FAMILIES, "acts"))
                for agg in aggs:
                    _build(workdir, agg, tmp, dict(agg.params), say, {f: root for f in ACTIVATION_FAMILIES})
                return [a.name for a in aggs]
            yield sw.key, sw.method, _shown(default), alt, build


def _forward_params(workdir: Path, rel: str) -> dict:
    p = workdir / rel / FORWARD_SUMMARY
    return json.loads(p.read_text()).get("params", {}) if p.exists() else {}


def _row(x, tables_dir: Path, ledger, models_run, base: dict, root=None, say=None) -> dict:
    """The row of alternative ``x`` (an ``_alternatives`` entry): its tables rebuilt in a
    temporary directory beside copies of every other table, the ledger re-read there. Recomputed
    shards go to ``root`` (default: the temporary directory)."""
    key, where, default, alt, build = x
    say = say or (lambda line: None)
    with tempfile.TemporaryDirectory(prefix="headgeom-choices-") as tmp:
        tmp = Path(tmp)
        for f in tables_dir.iterdir():
            if f.suffix in (".csv", ".md") and f.is_file():
                shutil.copyfile(f, tmp / f.name)
        try:
            built = build(tmp, Path(root) if root is not None else tmp / "recomputed", say)
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


def _evaluate(workdir: Path, tables_dir: Path, sources, ledger, models_run, base: dict, only, i: int) -> dict:
    """The row of alternative ``i`` of ``_alternatives``."""
    x = next(x for j, x in enumerate(_alternatives(workdir, tables_dir, sources, only)) if j == i)
    return _row(x, tables_dir, ledger, models_run, base)


def _base(ledger, tables_dir: Path, models_run) -> dict:
    return {r["id"]: r for r in build_rows(ledger, tables_dir, models_run)[0]}


def sensitivity(workdir, ledger: list[dict], models_run: list[str], tables_dir=None, sources: dict | None = None,
                workers: int = 1, tables=None, progress=None) -> Table:
    """Every alternative in this process (the workflow runs each as a job of its own: the same rows).
    ``sources``: the config's ``models:`` and ``texts:`` entries (``{"models": ..., "texts": ...}``),
    which the forward switches need to rerun forward passes (an alternative whose entries are
    missing gets a row saying so). ``tables``: the tables this run builds (None = every table in
    tables_dir); a table left in the directory by an earlier run of other models is not rebuilt.
    ``workers`` > 1 evaluates the alternatives in that many processes (each is independent; rows
    keep their order). ``progress(line)`` gets a line as each alternative ends."""
    workdir = Path(workdir)
    tables_dir = Path(tables_dir or workdir / layout.TABLES_DIR)
    base = _base(ledger, tables_dir, models_run)
    only = None if tables is None else set(tables)
    n = sum(1 for _ in _alternatives(workdir, tables_dir, sources, only))
    one = partial(_evaluate, workdir, tables_dir, sources, ledger, models_run, base, only)
    rows = []
    for row in _rows(one, n, workers):
        rows.append(row)
        _progress(progress, len(rows), n, row)
    return _table(rows, models_run)


def _table(rows: list[dict], models_run: list[str]) -> Table:
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
                       "forward-pass activations; the window-cutting switch reruns the forward passes and then "
                       "recomputes every activation shard (each alternative under results/sensitivity/).")


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


def _switches_param() -> dict:
    return {**{f"choices.{s.key}": list(s.alternatives) for s in SWITCHES},
            **{s.key: list(s.values) for s in (*TABLE_SWITCHES, *SHARD_SWITCHES, *FORWARD_SWITCHES)}}


def _write(t: Table, outputs: dict, ledger_path, models_run: list[str], inputs: list) -> None:
    if "html" in outputs:  # the report's view of the table; not in the sidecar (as the registry's tables)
        write_text(outputs["html"], t.html())
    write_set(outputs, {"csv": t.csv(), "md": t.markdown(), "tex": t.latex()}, {
        "table": t.name, "aggregation": "headgeom.verify.sensitivity.sensitivity",
        "params": {"models": list(models_run), "switches": _switches_param()},
        "code": code_version(), "columns": [c.key for c in t.columns],
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path)},
        "inputs": inputs,
    })


# ------------------------------------------------------------------ the workflow's jobs


def alternative_job(alt_id: str, ledger_path, workdir, models_run: list[str], out_row, tables, root,
                    forwarded: bool = False, progress=print, inputs=None) -> dict:
    """One alternative's row (rule ``sensitivity_tables`` / ``sensitivity_shards``) into out_row
    (JSON, with provenance): ``tables`` the tables of this run; recomputed shards go to
    root/<the run's relative path> (results/sensitivity/<alt>); ``forwarded``: a forward switch's
    forward passes were rerun under root by ``sensitivity_forward`` jobs. ``inputs``: the files
    the row's provenance lists (the rule's declared inputs, so that it does not depend on which
    other tables happened to exist when the job ran); default: this run's tables that exist."""
    workdir, root = Path(workdir), Path(root)
    tables_dir = workdir / layout.TABLES_DIR
    only = set(tables)
    x = next((x for x in _alternatives(workdir, tables_dir, None, only, acts_root=root if forwarded else None)
              if alternative_id(x[0], x[3]) == alt_id), None)
    if x is None:
        raise ConfigError(f"choice sensitivity: {alt_id!r} is not an alternative of this run (no such switch or value, "
                          "or it is the value the run's tables and shards were made with)")
    ledger = load_ledger(ledger_path)
    say = lambda line: progress(f"[choice_sensitivity] {alt_id}: {line}")  # noqa: E731
    say("evaluating")
    root.mkdir(parents=True, exist_ok=True)
    row = _row(x, tables_dir, ledger, models_run, _base(ledger, tables_dir, models_run), root=root, say=say)
    changed = "not evaluated" if row["changed"] is None else f"{row['changed']} claims change status"
    say(f"{row['tables']} tables rebuilt, {changed}")
    read = sorted({workdir / p for p in inputs}) if inputs is not None else \
        [tables_dir / f"{t}.csv" for t in sorted(only) if (tables_dir / f"{t}.csv").is_file()]
    write_recorded_json(out_row, {
        "alternative": alt_id, "row": row, "models": list(models_run), "code": code_version(),
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path)},
        "inputs": [{"path": str(p.relative_to(workdir)), "sha256": sha256_file(p)} for p in read],
    }, row_identity(alt_id, models_run, sorted(only), workdir))
    return row


def row_identity(alt_id: str, models_run, tables, workdir=".") -> dict:
    """What an alternative's row is: the alternative, the models and their checkpoints (tensor-store
    sha256s of the run's stores), and the digest of its job's config values (models, tables)."""
    from headgeom.io.shards import config_digest

    checkpoints = {}
    for m in models_run:
        try:
            checkpoints[m] = json.loads((Path(workdir) / layout.manifest(m)).read_text()).get("store_sha256")
        except (OSError, ValueError, AttributeError):
            checkpoints[m] = None
    return {"alternative": alt_id, "models": list(models_run), "checkpoints": checkpoints,
            "config": config_digest({"models": list(models_run), "tables": list(tables)})}


def row_problems(path, alt_id: str) -> list[str]:
    """Why the row at ``path`` is not the sound row of ``alt_id`` ([] = it is): its content record
    and identity (headgeom.io.files.recorded_json)."""
    return recorded_json(path, {"alternative": alt_id})[1]


def _forward_switch(alt_id: str):
    for sw in FORWARD_SWITCHES:
        for v in sw.values:
            if alternative_id(sw.key, v) == alt_id:
                return sw, v
    raise ConfigError(f"choice sensitivity: {alt_id!r} is not an alternative of a forward-pass switch (known: "
                      + ", ".join(alternative_id(s.key, v) for s in FORWARD_SWITCHES for v in s.values) + ")")


def forward_alternative_job(alt_id: str, model: str, corpus: str, n_windows, window, entry: dict,
                            corpus_entry: dict, workdir, out_dir, log=print, source=None) -> None:
    """Rule ``sensitivity_forward``: the run's forward pass of (model, corpus, windows) rerun with
    the forward switch's alternative into out_dir (results/sensitivity/<alt>/results/activations/...);
    ``source``: the alternative's longer pass of the same corpus and window length, whose first
    windows are this one's (jobs.activation.windows_job; headgeom.schedule.families.forward_source)."""
    sw, value = _forward_switch(alt_id)
    rel = layout.activations(model, corpus, n_windows, window)
    if source is not None:
        log(f"[choice_sensitivity] {alt_id}: the forward pass {rel} from the first windows of {source}")
        windows_job(source, out_dir, int(n_windows), log=log)
        return
    log(f"[choice_sensitivity] {alt_id}: rerunning the forward pass {rel}")
    _forward_one(Path(workdir), rel, model, corpus, entry, corpus_entry, sw, value, out_dir, log)


def aggregate_job(ledger_path, models_run: list[str], alternatives: list[str], row_paths: list, outputs: dict,
                  progress=None) -> Table:
    """Rule ``choice_sensitivity``: the rows of the alternative jobs, in ``alternatives`` order."""
    rows, inputs = [], []
    for i, (alt_id, p) in enumerate(zip(alternatives, row_paths, strict=True)):
        rec, problems = recorded_json(p, {"alternative": alt_id})
        if problems:
            raise DamagedFileError(f"{p} is damaged: {'; '.join(problems)}; rebuild it: {rebuild_hint(p)}")
        rows.append(rec["row"])
        inputs.append({"path": str(p), "sha256": sha256_file(p)})
        _progress(progress, i + 1, len(alternatives), rec["row"])
    t = _table(rows, models_run)
    _write(t, outputs, ledger_path, models_run, inputs)
    return t


def planned_jobs(config: dict, fields: dict[str, dict]) -> list:
    """The choice sensitivity's jobs (workflow/rules/sensitivity.smk) for the models of ``fields``
    (model -> shape): one per alternative, and the forward passes window cutting reruns."""
    from headgeom.schedule.families import FORWARD, activation_models
    from headgeom.commands.plan import PlannedJob
    from headgeom.targets import built_tables

    act = [m for m in activation_models(config) if m in fields]
    out = []
    for alt in planned(config, built_tables(config), act):
        r = alternative_cost(alt, {m: fields[m] for m in act}, config)
        rule = "sensitivity_tables" if alt.kind == "tables" else "sensitivity_shards"
        out.append(PlannedJob.of(rule, "", {"alt": alt.id}, r, layout.sensitivity_row(alt.id)))
        for model, corpus, nwin, win in alt.forwards:
            wc = {"corpus": corpus, "nwin": nwin, "win": win}
            r = FORWARD.cost(fields[model], config, wc)
            out.append(PlannedJob.of("sensitivity_forward", model, {"alt": alt.id, **wc}, r,
                                     layout.sensitivity_activations(alt.id, model, corpus, nwin, win)))
    return out
