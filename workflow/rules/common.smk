import json
import re

from headgeom.core.provenance import code_version
from headgeom.jobs import costs, fanout
from headgeom.jobs.families import (
    FAMILIES,
    JOBS as FAMILY_JOBS,
    activation_dir,
    n_parts,
    shard_paths,
)
from headgeom.reports.outputs import OUTPUTS


def _check_active_models():
    unknown = [m for m in config["active_models"] if m not in config["models"]]
    if unknown:
        raise ValueError(
            f"config: active_models names {unknown}, which are not under models: "
            f"(known: {sorted(config['models'])})"
        )


_check_active_models()

ACTIVE = list(config["active_models"])
# every target of `all`; workflow/rules/outputs.smk adds each table's and figure's files
ALL_TARGETS = []


wildcard_constraints:
    model="|".join(re.escape(m) for m in config["models"]),
    layer=r"\d+",
    block=r"\d+",
    part=r"\d+",


def model_fields(model):
    """The model's shape, known once its tensors are fetched (fetch is a checkpoint)."""
    manifest = checkpoints.fetch.get(model=model).output.manifest
    with open(manifest) as fh:
        return json.load(fh)["fields"]


def family_shards(name, models=None):
    """Input function: every shard of one family (headgeom.jobs.families) for the models
    (default: the active ones), model by model; layer counts come from the fetched manifests.
    """

    def inner(wildcards):
        paths = []
        for m in ACTIVE if models is None else models:
            f = model_fields(m)
            parts = n_parts(FAMILIES[name].job, f, config)
            paths += shard_paths(name, m, f["n_layers"], NULL_BLOCKS, parts)
        return paths

    return inner


def job_cost(job, key):
    """mem_mb / runtime of one job from the model's shape (the job's cost model in
    headgeom.jobs.families; docs/costs.md), times the attempt: a job that died for memory or
    time is retried (profile `retries`) with twice, three times, ... the request."""

    def inner(wildcards, input, attempt):
        return costs.grow(job.cost(input.manifest, config, wildcards), attempt)[key]

    return inner


# Between-workflow cache (`--cache` + $SNAKEMAKE_OUTPUT_CACHE; docs/cluster.md). Snakemake keys
# a cached output by the rule's script, params, software and upstream jobs, not by wildcards or
# by the headgeom package: with --cache the cacheable rules also get a `cache_key` param naming
# the job's wildcards, the package source hash and the tensors' sha256 (content addressing).
CACHE_ON = bool(workflow.workflow_settings.cache is not None)


def cache_key(wildcards, input):
    """What a cached shard depends on besides params: the job's wildcards, the code, the tensors."""
    with open(input.manifest) as fh:
        m = json.load(fh)
    key = {
        "wildcards": dict(wildcards.items()),
        "code": code_version()["source_sha256"],
        "store_sha256": m["store_sha256"],
    }
    if "final_manifest" in input.keys():
        with open(input.final_manifest) as fh:
            key["final_store_sha256"] = json.load(fh)["store_sha256"]
    return key


def source_key(wildcards):
    """Fetch under --cache: a local checkpoint's files (name, size, mtime) join the key, so a
    changed local checkpoint is fetched again; hub sources are keyed by repo_id + revision.
    """
    entry = config["models"][wildcards.model]
    key = {"code": code_version()["source_sha256"]}
    if entry.get("source") == "local":
        root = Path(entry["path"])
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        key["files"] = [
            [
                str(f.relative_to(root) if root.is_dir() else f.name),
                st.st_size,
                st.st_mtime_ns,
            ]
            for f in files
            if f.is_file()
            for st in [f.stat()]
        ]
    return key


def job_attempt(wildcards, attempt):
    """The attempt number as a resource: the job records it in its shards' provenance."""
    return attempt


def JOB_INPUTS(job):
    """The tensor store of the job's model (and of its lineage's final checkpoint; and the
    forward pass's activations for the activation stage's jobs)."""
    store = {
        "manifest": "results/tensors/{model}/manifest.json",
        "tensors": "results/tensors/{model}/tensors.safetensors",
    }
    if job.final_model:
        store["final_manifest"] = (
            lambda wc: f"results/tensors/{p1_final(wc.model)}/manifest.json"
        )
        store["final_tensors"] = (
            lambda wc: f"results/tensors/{p1_final(wc.model)}/tensors.safetensors"
        )
    if job.activations:
        store["acts"] = activation_dir(config, job.activations)
    return store


def JOB_PARAMS(job):
    """The config values the job reads (and nothing else: editing another key reruns nothing)."""
    params = {k: lookup(dpath=d, within=config) for k, d in job.params.items()}
    if job.blocks:
        params["samples"] = block_samples(job.blocks)
    if job.final_model:
        params["final_model"] = lambda wc: p1_final(wc.model)
    if job.fanout:
        params["pairs"] = pair_segments(job)
    if CACHE_ON and job.cache:
        params["cache_key"] = cache_key
    return params


def pair_segments(job):
    """The layer pairs of one part (headgeom.jobs.fanout): params, so that a changed ceiling
    or sample block size reruns exactly the parts whose pairs changed."""

    def inner(wildcards, input):
        with open(input.manifest) as fh:
            f = json.load(fh)["fields"]
        return [list(s) for s in fanout.part(job.name, f, config, int(wildcards.part))]

    return inner


def OUTPUT_FILES(out):
    """An output's files, its CSV / PNG marked for `snakemake --report` with the registry's
    caption (workflow/report/captions/<kind>_<name>.rst, written by `headgeom docs`)."""
    return {
        **out.paths(),
        "csv" if out.kind == "table" else "png": report(
            out.main,
            caption=f"../report/captions/{out.kind}_{out.name}.rst",
            category=out.paper,
            subcategory=f"{out.kind.capitalize()}s",
            labels={"name": out.name, "kind": out.kind},
        ),
    }


def OUTPUT_PARAMS(out):
    """The config values the output reads (its registry entry's params) and derived ones."""
    params = {k: lookup(dpath=d, within=config) for k, d in out.params.items()}
    if "pairs" in out.derived:
        params["pairs"] = _pairs()
    return params
