"""The claims ledger judged under each alternative of each reconstructed choice (*(choice)*,
docs/methods.md; the switches: headgeom.outputs.choices; the alternatives of a config and the table
of their rows: headgeom.publish.choice_sensitivity).

An alternative's tables are rebuilt from the shards their provenance sidecars list
(headgeom.verify.audit.rebuild_table) beside copies of every other table; a shard switch first
recomputes its shard family from the stored forward-pass activations their provenance names
(headgeom.verify.audit.recompute_shards, the job's own code); a forward switch reruns the forward
passes first. The ledger (headgeom.publish.claims) is then judged on both sets of tables and each
claim whose status differs is listed in the alternative's row.

In the workflow (workflow/rules/sensitivity.smk) every alternative is a job of its own:
``sensitivity_tables`` / ``sensitivity_shards`` write the alternative's row (``alternative_job``)
into results/sensitivity/<switch>=<value>/row.json, recomputed shards beside it at the run's
relative paths; ``sensitivity_forward`` reruns one forward pass there (``forward_alternative_job``).
``sensitivity(workdir, ledger, models)`` evaluates every alternative in one process (temporary
directories): the same rows, as the table."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tempfile
from functools import partial
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import ConfigError
from headgeom.core.provenance import code_version
from headgeom.io.files import sha256_file, write_recorded_json
from headgeom.jobs.activation import FORWARD_SUMMARY, forward_job, windows_job
from headgeom.outputs import TABLES
from headgeom.outputs.choices import ACTIVATION_FAMILIES, DEFAULTS, FORWARD_SWITCHES, SHARD_SWITCHES, SWITCHES, TABLE_SWITCHES, ForwardSwitch
from headgeom.outputs.formats import Table
from headgeom.outputs.registry import HEADS
from headgeom.publish.choice_sensitivity import (activation_tables, alternative_id, choice_tables, family_tables, nested_value,
                                                 other_values, progress_line, row_identity, sensitivity_table, shown_default,
                                                 value_text)
from headgeom.publish.claims import build_rows, load_ledger
from headgeom.schedule.families import FORWARD, JOBS, SHARD_FAMILIES
from headgeom.verify import audit


def _set(d: dict, path: tuple, value) -> dict:
    out = dict(d)
    if len(path) == 1:
        out[path[0]] = value
    else:
        out[path[0]] = _set(dict(out.get(path[0]) or {}), path[1:], value)
    return out


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


def _alternatives(workdir: Path, tables_dir: Path, sources: dict | None = None, only=None, acts_root=None):
    """(switch, where, default, alternative, build(out_dir, root, say) -> tables rebuilt) for every
    alternative (``only``: the tables of this run; None = every table found). ``build`` writes
    recomputed shards into root/<the run's relative path>; a forward switch reads its rerun forward
    passes under ``acts_root`` when given (the workflow's jobs ran them), else reruns them into root
    (with the config entries in ``sources``)."""
    heads_tables = choice_tables()
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
        default = next((nested_value(a.params, sw.param) for a in aggs if nested_value(a.params, sw.param) is not None), sw.fallback)
        for alt in other_values(sw.values, default):
            def build(tmp, root, say, sw=sw, alt=alt, aggs=aggs):
                for agg in aggs:
                    _build(workdir, agg, tmp, _set(agg.params, sw.param, alt), say)
                return [a.name for a in aggs]
            yield sw.key, sw.method, shown_default(default), alt, build
    for sw in SHARD_SWITCHES:
        aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in family_tables(sw.family)) if a is not None]
        aggs = [a for a in aggs if a.groups.get(sw.family)]
        default = next((nested_value(prov, ("params", sw.job_param)) for prov in _shard_records(aggs, (sw.family,)).values()),
                       sw.fallback)
        for alt in other_values(sw.values, default):
            def build(tmp, root, say, sw=sw, alt=alt, aggs=aggs):
                if not aggs:
                    return []
                _recompute(workdir, _shard_records(aggs, (sw.family,)), root, say, {sw.job_param: alt},
                           unchanged=unchanged_columns((sw.family,), sw.job_param))
                for agg in aggs:
                    params = _set(agg.params, (sw.table_param,), alt) if sw.table_param else dict(agg.params)
                    _build(workdir, agg, tmp, params, say, {sw.family: root})
                return [a.name for a in aggs]
            yield sw.key, sw.method, shown_default(default), alt, build
    aggs = [a for a in (_agg(workdir, tables_dir, n, only) for n in activation_tables()) if a is not None]
    aggs = [a for a in aggs if any(a.groups.get(f) for f in ACTIVATION_FAMILIES)]
    for sw in FORWARD_SWITCHES:
        defaults = {nested_value(_forward_params(workdir, rel), (sw.param,)) for rel in _forward_dirs(aggs)}
        default = defaults.pop() if len(defaults) == 1 else None
        default = sw.fallback if default is None else default
        for alt in other_values(sw.values, default):
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
            yield sw.key, sw.method, shown_default(default), alt, build


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
            return {"switch": key, "default": default, "alternative": value_text(alt), "where": where, "tables": 0,
                    "claims_read": None, "claims_judged": None, "changed": None, "claims": f"not evaluated: {why}"}
        alt_rows = {r["id"]: r for r in build_rows(ledger, tmp, models_run)[0]}
    read = [i for i, r in base.items() if r["read"].split("[")[0].split(":")[0] in built]
    judged = [i for i in read if base[i]["status"] in ("agrees", "differs")]
    changed = [i for i in base if i in alt_rows and alt_rows[i]["status"] != base[i]["status"]]
    return {
        "switch": key, "default": default, "alternative": value_text(alt), "where": where,
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
        progress_line(progress, len(rows), n, row)
    return sensitivity_table(rows, models_run)


def _rows(one, n: int, workers: int):
    """one(0), ..., one(n - 1) in order; in ``workers`` processes when there are several."""
    if workers > 1 and n > 1:
        # fork: the rule's script runs as __main__, which a spawned worker would execute again
        with multiprocessing.get_context("fork").Pool(min(workers, n)) as pool:
            yield from pool.imap(one, range(n), chunksize=1)
    else:
        yield from map(one, range(n))


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
