"""The choice-sensitivity table (results/tables/choice_sensitivity.*): for each switch of a
reconstructed choice (*(choice)*, docs/methods.md; the switches: headgeom.outputs.choices) and
each alternative, which ledger claims change status.

Here: the alternatives of a config (``planned``, in the table's row order, each one job of
workflow/rules/sensitivity.smk) and their cost model (``alternative_cost``, ``planned_jobs``); what
an alternative's row is (``row_identity``, ``row_problems``); and the table itself, put together
from the rows (``aggregate_job``, rule ``choice_sensitivity``). The rows are evaluated by
headgeom.verify.sensitivity: an alternative's tables rebuilt and the ledger judged on them.

The kinds of alternative (``KINDS``):

* ``tables``: the ``choices:`` switches of paper 1 (column selection in the ``paper1_heads``
  shards) and the table params ``TABLE_SWITCHES`` (paper 1's left-zero band membership and its
  threshold τ) rebuild the tables taking them from the run's own shards;
* ``shards``: ``SHARD_SWITCHES`` of the activation stage's per-layer analysis jobs (the
  natural-return endpoint ``activation.paper1.endpoint``; the norm epsilon in J(x),
  ``activation.read_paths.eps_exact``) recompute that one shard family from the stored forward-pass
  activations, then rebuild the tables reading it;
* ``forward``: window cutting, ``FORWARD_SWITCHES`` (``activation.bos``), reruns each forward pass
  behind the activation shards with the alternative, then recomputes every activation shard."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import DamagedFileError
from headgeom.core.provenance import code_version
from headgeom.io.files import recorded_json, sha256_file, write_set, write_text
from headgeom.io.shards import rebuild_hint
from headgeom.outputs import TABLES
from headgeom.outputs.choices import (
    ACTIVATION_FAMILIES,
    FORWARD_SWITCHES,
    SHARD_SWITCHES,
    SWITCHES,
    TABLE_SWITCHES,
)
from headgeom.outputs.formats import Column, Table
from headgeom.schedule.families import forward_shapes


KINDS = ("tables", "shards", "forward")  # what an alternative recomputes (headgeom.outputs.choices)


def choice_tables() -> list[str]:
    """Tables whose builder reads the paper1_heads shards (and so the switched columns)."""
    return family_tables("paper1_heads")


def family_tables(family: str) -> list[str]:
    """The tables whose builder reads shard family ``family``."""
    return [n for n, o in TABLES.items() if family in o.families]


def activation_tables() -> list[str]:
    """The tables reading an activation shard family (what a forward switch rebuilds)."""
    return list(dict.fromkeys(t for f in ACTIVATION_FAMILIES for t in family_tables(f)))


def affected_tables() -> list[str]:
    """Every table some switch rebuilds (the rules' inputs are their sidecars)."""
    names = choice_tables() + [t for sw in TABLE_SWITCHES for t in sw.tables]
    names += [t for sw in SHARD_SWITCHES for t in family_tables(sw.family)]
    return list(dict.fromkeys(names))


def nested_value(d: dict, path: tuple):
    """``d[path[0]][path[1]]...``, or None where a key is missing (a switch's value in a config or params)."""
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def value_text(v) -> str:
    """A switch value as the table and the alternative ids write it (booleans lower case)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def alternative_id(switch: str, value) -> str:
    """An alternative's name (its directory under results/sensitivity): ``<switch>=<value>``."""
    return f"{switch}={value_text(value)}"


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
    heads = tuple(t for t in choice_tables() if t in built)
    for sw in SWITCHES:
        out += [Alternative(f"choices.{sw.key}", v, "tables", sw.default, heads) for v in sw.alternatives[1:]]
    for sw in TABLE_SWITCHES:
        tables = tuple(t for t in sw.tables if t in built)
        default = nested_value(config, tuple(sw.key.split("."))) if tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "tables", shown_default(default), tables) for v in other_values(sw.values, default)]
    for sw in SHARD_SWITCHES:
        tables = tuple(t for t in family_tables(sw.family) if t in built) if act_models else ()
        default = nested_value(config, tuple(sw.key.split("."))) if tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "shards", shown_default(default), tables, (sw.family,))
                for v in other_values(sw.values, default)]
    act_tables = tuple(t for t in activation_tables() if t in built) if act_models else ()
    forwards = tuple(f for m in act_models for f in _forward_shapes(config, m)) if act_tables else ()
    for sw in FORWARD_SWITCHES:
        default = nested_value(config, tuple(sw.key.split("."))) if act_tables else None
        default = sw.fallback if default is None else default
        out += [Alternative(sw.key, v, "forward", shown_default(default), act_tables, ACTIVATION_FAMILIES, forwards)
                for v in other_values(sw.values, default)]
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


def other_values(values, default) -> list:
    """The values of a switch other than the run's own (all of them when it is unknown)."""
    return [v for v in values if default is None or value_text(v) != value_text(default)]


def shown_default(default) -> str:
    """The run's value of a switch as the table's Default column shows it (– when unknown)."""
    return "–" if default is None else value_text(default)


def sensitivity_table(rows: list[dict], models_run: list[str]) -> Table:
    """The choice-sensitivity table of the alternatives' rows."""
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


def progress_line(progress, done: int, n: int, row: dict) -> None:
    """Tell ``progress`` (if any) that the row of alternative ``done`` of ``n`` is made."""
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
        progress_line(progress, i + 1, len(alternatives), rec["row"])
    t = sensitivity_table(rows, models_run)
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
