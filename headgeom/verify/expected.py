"""Every file a run of a config is expected to leave, computed from the config and the registries
as the rule files compute the DAG (headgeom.rules.*): the tensor stores, the shards each output
reads (with the config digest each shard's job is given), the forward passes, the choice
sensitivity's rows and forward passes, and every table and figure with its sidecar.

``headgeom verify`` checks this set, not only the files it finds; the workflow's load check
(headgeom.verify.integrity.to_rebuild) checks the same set before any job runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from headgeom import layout, targets


@dataclass
class Expected:
    """The files of a run (paths relative to its work directory)."""

    stores: dict[str, str] = field(default_factory=dict)  # model -> its store's directory
    shards: dict[str, str] = field(default_factory=dict)  # shard -> the config digest of its job's params
    forwards: list[str] = field(default_factory=list)  # forward-pass directories (the run's and the alternatives')
    rows: dict[str, str] = field(default_factory=dict)  # sensitivity row -> its alternative
    outputs: list[tuple[str, str, dict]] = field(default_factory=list)  # (kind, name, files by key incl. prov)
    unfetched: list[str] = field(default_factory=list)  # models whose store is missing (their shards unknown)


def job_param_values(config: dict, job, model: str, wildcards: dict, fields: dict, parts=None) -> dict:
    """The params a per-layer job is given (headgeom.rules.jobs.job_params, as values: what the job
    records in its shards' provenance; neither its name nor the cache key). ``parts``: the model's
    fan-out parts of the job (headgeom.schedule.fanout.parts), when the caller has them."""
    from headgeom.schedule import designs, fanout

    layer = wildcards.get("layer")
    layer = None if layer is None else int(layer)
    params = {k: designs.lookup(config, model, d, layer) for k, d in job.params.items()}
    if job.blocks:
        params["samples"] = designs.samples(job, config, model, int(wildcards["block"]), fields, layer)
    if job.final_model:
        params["final_model"] = targets.final_model(config, model)
    if job.fanout:
        part = int(wildcards["part"])
        seg = parts[part] if parts is not None else fanout.part(job, fields, designs.model_config(config, model), part)
        params["pairs"] = [list(s) for s in seg]
    return params


def _fields(workdir: Path, model: str) -> dict | None:
    try:
        return json.loads((workdir / layout.manifest(model)).read_text())["fields"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def expected(config: dict, workdir: str | Path = ".") -> Expected:
    """The files a complete run of ``config`` in ``workdir`` has (``Expected``). A model whose
    tensor store is missing or unreadable is listed in ``unfetched``: its shards follow from its
    shape, known once it is fetched."""
    from headgeom.io.shards import config_digest
    from headgeom.outputs import OUTPUTS
    from headgeom.schedule import designs, fanout
    from headgeom.schedule.families import JOBS, SHARD_FAMILIES, activation_models, forward_shapes
    from headgeom.publish.choice_sensitivity import planned

    workdir = Path(workdir)
    exp = Expected()
    fields: dict[str, dict | None] = {}

    def shape(m: str) -> dict | None:
        if m not in fields:
            exp.stores[m] = layout.tensors_dir(m)
            fields[m] = _fields(workdir, m)
            if fields[m] is None:
                exp.unfetched.append(m)
        return fields[m]

    for m in config["active_models"]:
        shape(m)
    for out in OUTPUTS.values():
        if not targets.builder_models(out, config):
            continue
        exp.outputs.append((out.kind, out.name, out.paths()))
        models = targets.output_models(config)[out.shard_models]
        cfg = config if out.shard_models != "activation" else designs.global_design(config)
        for m in models:
            for fam in out.families:
                job = JOBS[SHARD_FAMILIES[fam].job]
                if job.final_model:
                    shape(targets.final_model(config, m))
                if not designs.runs(job.name, cfg, m) or shape(m) is None:
                    continue
                parts = fanout.parts(job, fields[m], designs.model_config(config, m)) if job.fanout else None
                for wc in designs.job_wildcards(job.name, cfg, m, fields[m]):
                    path = SHARD_FAMILIES[fam].path.format(model=m, **wc)
                    if path not in exp.shards:  # the job's params come from the run's config (its designs)
                        exp.shards[path] = config_digest(job_param_values(config, job, m, wc, fields[m], parts))
    for t in targets.CLAIMS_TABLES:
        files = layout.table_files(t)
        exp.outputs.append(("table", t, {k: v for k, v in files.items() if k != "html"}))
    act = activation_models(config)
    exp.forwards = [layout.activations(m, *s) for m in act for s in forward_shapes(config)]
    for alt in planned(config, targets.built_tables(config), targets.output_models(config)["activation"]):
        exp.rows[layout.sensitivity_row(alt.id)] = alt.id
        exp.forwards += [layout.sensitivity_activations(alt.id, *f) for f in alt.forwards]
    return exp
