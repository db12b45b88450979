"""The tables and figures (workflow/rules/outputs.smk: one rule per entry of headgeom.outputs):
the shards each reads, its files (marked for ``snakemake --report``), its params."""

from __future__ import annotations

import json

from snakemake.io import report
from snakemake.ioutils import lookup

from headgeom import layout, targets
from headgeom.targets import base_instruct_pairs
from headgeom.rules.jobs import family_shards
from headgeom.rules.start import reporting


def output_inputs(config: dict, checkpoints, out) -> dict:
    """The shard families the output's entry names, for the models whose shards it reads (the
    activation outputs read closure shards of every layer, whatever a design says), and the
    manifests of the active models and of those."""
    models = targets.output_models(config)[out.shard_models]
    return {
        **{fam: family_shards(config, checkpoints, fam, models, by_design=out.shard_models != "activation")
           for fam in out.families},
        "manifests": [layout.manifest(m) for m in dict.fromkeys(list(config["active_models"]) + models)],
    }


def output_files(out) -> dict:
    """An output's files, its HTML rendering (tables) / PNG marked for `snakemake --report`
    with its caption (workflow/report/captions/<kind>_<name>.rst: `headgeom docs`)."""
    return {
        **out.paths(),
        "html" if out.kind == "table" else "png": report(
            out.main,
            caption=f"../report/captions/{out.kind}_{out.name}.rst",
            category=out.paper,
            subcategory=f"{out.kind.capitalize()}s",
            labels={"name": out.name, "kind": out.kind},
        ),
    }


def built_params(out) -> dict:
    """The params recorded in an output's provenance sidecar ({} when there is none)."""
    try:
        with open(out.paths()["prov"]) as fh:
            return json.load(fh).get("params") or {}
    except (OSError, ValueError):
        return {}


def output_params(config: dict, out) -> dict:
    """The config values the output reads (its registry entry's params) and derived ones (the
    base/instruct pairs); under --report, those it was built with where its provenance records
    them (`snakemake --report` renders each caption with its job's params); which output, and the
    models its builder covers (headgeom.targets.builder_models)."""
    params = {k: lookup(dpath=d, within=config) for k, d in out.params.items()}
    if "pairs" in out.derived:
        params["pairs"] = base_instruct_pairs(config)
    if reporting():
        built = built_params(out)
        params.update({k: built[k] for k in params if k in built})
    params["output"] = [out.kind, out.name]
    params["models"] = targets.builder_models(out, config)
    return params
