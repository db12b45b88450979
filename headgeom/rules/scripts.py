"""The workflow's job entries (``ENTRIES``): the per-layer jobs' command (headgeom.rules.jobclient) and
the workflow scripts (workflow/scripts/*.py) name one each, a function of the job's ``snakemake``
object, which the local run's job server forks or the job's own process runs
(headgeom.rules.jobserver). Each reads only the object's values (input, output, log, params,
wildcards, resources, rule, config), which the server hands over as plain data. A plugin module
(HEADGEOM_PLUGINS) may register more with ``entry``."""

from __future__ import annotations

import os
from pathlib import Path


def per_layer_job(smk) -> None:
    """One per-layer job of the shard-family registry (headgeom.schedule.families.JOBS), named by params.job."""
    from headgeom.core.logs import to_log
    from headgeom.core.provenance import set_run
    from headgeom.schedule.families import load_plugins, run_job

    load_plugins()  # a HEADGEOM_PLUGINS job runs here too: this process read no Snakefile
    log = to_log(smk)
    params = dict(smk.params.items())
    job = params.pop("job")
    params.pop("cache_key", None)  # the cache's key (headgeom.rules.fetch.cache_key), not an input of the job
    params.pop("spec", None)  # these values again, for the job's command (headgeom.rules.jobs.job_spec)
    attempt = int(smk.resources.get("attempt", 1))
    set_run(attempt=attempt, rule=job, mem_mb=smk.resources.get("mem_mb"),
            runtime_min=smk.resources.get("runtime"), slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            slurm_array_job_id=os.environ.get("SLURM_ARRAY_JOB_ID"),
            slurm_array_task_id=os.environ.get("SLURM_ARRAY_TASK_ID"))
    run_job(job, dict(smk.input.items()), dict(smk.output.items()), dict(smk.wildcards.items()), params, log=log)


def output(smk) -> None:
    """One table or figure of the output registry (headgeom.outputs), named by params.output (kind, name)."""
    from headgeom.core.logs import to_log
    from headgeom.outputs import build_output

    log = to_log(smk)
    params = dict(smk.params.items())
    (kind, name), models = params.pop("output"), params.pop("models")
    inputs = {k: list(v) for k, v in smk.input.items() if k != "manifests"}
    build_output(kind, name, inputs, list(smk.input.manifests), list(models), dict(smk.output.items()), params)
    log(f"[{kind} {name}] from {sum(len(v) for v in inputs.values())} shards")


def fetch_tensors(smk) -> None:
    """A model's attention tensors into its tensor store (headgeom.io.fetch)."""
    from headgeom.core.logs import to_log
    from headgeom.io.fetch import fetch_model

    log = to_log(smk)
    fetch_model(smk.wildcards.model, dict(smk.params.entry), Path(smk.output.manifest).parent, log=log)


def claims(smk) -> None:
    """The claims ledger's table and its page."""
    from headgeom.core.logs import to_log
    from headgeom.publish.claims import claims_job
    from headgeom.publish.ledger_page import write_ledger_page

    log = to_log(smk)
    tables = Path(smk.output.csv).parent
    outputs = {k: v for k, v in smk.output.items() if k != "html"}
    t = claims_job(smk.input.ledger, tables, list(smk.params.models), outputs)
    # the ledger page (filterable, each row linked to the table row it reads) in place of the plain table page
    write_ledger_page(smk.output.html, smk.input.ledger, t, tables)
    log(f"[claims] {len(t.rows)} claims from {smk.input.ledger}; {t.notes}")


def macros(smk) -> None:
    """The papers' LaTeX macros of the claims and cells."""
    from headgeom.core.logs import to_log
    from headgeom.publish.macros import config_hash, macros_job

    log = to_log(smk)
    macros_job(smk.input.ledger, Path(smk.input.claims).parent, list(smk.params.models),
               list(smk.params.cells), config_hash(smk.config), dict(smk.output.items()))
    log(f"[macros] {smk.output.claims}, {smk.output.cells} ({len(smk.params.cells)} cells)")


def summary(smk) -> None:
    """results/summary.md of this work directory."""
    from headgeom.core.logs import to_log
    from headgeom.publish.summary import summary_job

    log = to_log(smk)
    summary_job(smk.output.md, list(smk.params.models))
    log(f"[summary] {smk.output.md} for {', '.join(smk.params.models)}")


def choice_sensitivity(smk) -> None:
    """The table of the choice sensitivity (headgeom.publish.choice_sensitivity): the alternatives' rows,
    in the table's order."""
    from headgeom.core.logs import to_log
    from headgeom.publish.choice_sensitivity import aggregate_job

    log = to_log(smk)
    t = aggregate_job(smk.input.ledger, list(smk.params.models), list(smk.params.alternatives),
                      list(smk.input.rows), dict(smk.output.items()), progress=log)
    log(f"[choice_sensitivity] {len(t.rows)} alternatives; {sum(r['changed'] or 0 for r in t.rows)} status changes")


def sensitivity_row(smk) -> None:
    """One alternative's row of the choice sensitivity (headgeom.verify.sensitivity): its tables rebuilt,
    the ledger judged on them."""
    from headgeom import layout
    from headgeom.core.logs import to_log
    from headgeom.verify.sensitivity import alternative_job

    log = to_log(smk)
    alt = smk.wildcards.alt
    if "shards" in smk.output.keys():  # a directory output: there even when nothing is recomputed
        Path(smk.output.shards).mkdir(parents=True, exist_ok=True)
    alternative_job(alt, smk.input.ledger, Path.cwd(), list(smk.params.models), smk.output.row,
                    list(smk.params.tables), layout.sensitivity_dir(alt),
                    forwarded=smk.params.kind == "forward", progress=log.progress,
                    inputs=[*smk.input.tables, *smk.input.provs])


ENTRIES = {f.__name__: f for f in (per_layer_job, output, fetch_tensors, claims, macros, summary, choice_sensitivity,
                                   sensitivity_row)}


def entry(fn):
    """Register ``fn`` as a job entry under its name (a plugin's; decorator)."""
    ENTRIES[fn.__name__] = fn
    return fn


def entry_function(name: str):
    """The entry registered under ``name``, the plugins' included (HEADGEOM_PLUGINS)."""
    from headgeom.core.errors import ConfigError
    from headgeom.schedule.families import load_plugins

    if name not in ENTRIES:
        load_plugins()
    try:
        return ENTRIES[name]
    except KeyError:
        raise ConfigError(f"no job entry {name!r} (headgeom.rules.scripts.ENTRIES: {', '.join(sorted(ENTRIES))}; "
                          f"a plugin's: HEADGEOM_PLUGINS)") from None
