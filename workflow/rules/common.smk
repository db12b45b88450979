import json
import re
import sys

from headgeom import layout, targets
from headgeom.core.provenance import code_version
from headgeom.io.files import within_workdir
from headgeom.schedule import costs, designs, fanout
from headgeom.patches import scheduler_timers, slurm_arrays
from headgeom.schedule.families import (
    SHARD_FAMILIES,
    FETCH,
    FORWARD,
    JOBS as FAMILY_JOBS,
    activation_dir,
)
from headgeom.outputs import OUTPUTS


def _rebuild_damaged_shards():
    """A shard whose content does not match its record, or that does not parse, and every shard
    a table's sidecar lists that is missing, are rebuilt in this run with what reads them
    (headgeom.verify.integrity; one line each). Only the main process checks (not --lint).
    """
    if workflow.is_main_process and "--lint" not in sys.argv:
        from headgeom.patches.forcerun import force_rebuild
        from headgeom.verify.integrity import shards_to_rebuild

        say = lambda line: print(line, file=sys.stderr)
        force_rebuild(workflow, shards_to_rebuild(".", say=say))


_rebuild_damaged_shards()
# under --profile slurm: one job array per distinct resource request (headgeom/patches/slurm_arrays.py)
slurm_arrays.install()
# one pending re-evaluation timer in Snakemake's scheduler, not a chain per event (headgeom/patches/scheduler_timers.py)
scheduler_timers.install()

ACTIVE = list(config["active_models"])
# whose shards each output reads, and the models its builder covers (headgeom.targets)
OUTPUT_MODELS = targets.output_models(config)


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


def family_shards(name, models=None, by_design=True):
    """Input function: every shard of one family (headgeom.schedule.families) for the models
    (default: the active ones), model by model, as each model's design schedules them
    (headgeom.schedule.designs; ``by_design=False``: the global design, every layer, whatever the
    scope says); layer counts come from the fetched manifests.
    """
    cfg = config if by_design else designs.global_design(config)

    def inner(wildcards):
        paths = []
        for m in ACTIVE if models is None else models:
            if designs.runs(SHARD_FAMILIES[name].job, cfg, m):
                paths += designs.shard_paths(name, cfg, m, model_fields(m))
        return paths

    return inner


def job_cost(job, key):
    """mem_mb / runtime of one job from the model's shape (the job's cost model in
    headgeom.schedule.families; docs/costs.md), times the attempt: a job that died for memory or
    time is retried (profile `retries`) with twice, three times, ... the request."""

    def inner(wildcards, input, attempt):
        mc = designs.model_config(config, wildcards.model, _layer(wildcards))
        return costs.grow(job.cost(input.manifest, mc, wildcards), attempt)[key]

    return inner


# Between-workflow cache (`--cache` + $SNAKEMAKE_OUTPUT_CACHE; docs/cluster.md). Snakemake keys
# a cached output by the rule's script, params, software and upstream jobs, not by wildcards or
# by the headgeom package: with --cache the cacheable rules also get a `cache_key` param naming
# the job's wildcards, the package source hash and the tensors' sha256 (content addressing).
CACHE_ON = bool(workflow.workflow_settings.cache is not None)
# Snakemake 9.27 hands `--cache` on to remote jobs (the SLURM jobstep, where the cache is read and
# written) only when it names the cached steps; a bare `--cache` would cache nothing on a cluster. So a
# bare `--cache` is turned into the list of cacheable rules (the same set a local run caches).
if CACHE_ON and not workflow.workflow_settings.cache:
    workflow.workflow_settings.cache = [FETCH.name] + [
        j.name for j in FAMILY_JOBS.values() if j.cache
    ]


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
    store = {"manifest": layout.MANIFEST, "tensors": layout.TENSORS}
    if job.final_model:
        store["final_manifest"] = lambda wc: layout.manifest(p1_final(wc.model))
        store["final_tensors"] = lambda wc: layout.tensors(p1_final(wc.model))
    if job.activations:
        store["acts"] = activation_dir(config, job.activations)
    return store


def JOB_PARAMS(job):
    """The config values the job reads (and nothing else: editing another key reruns nothing);
    ``pk/...`` keys as the model's design resolves them (headgeom.schedule.designs)."""
    params = {
        k: design_param(d) if d.startswith("pk/") else lookup(dpath=d, within=config)
        for k, d in job.params.items()
    }
    if job.blocks:
        params["samples"] = block_samples(job.blocks)
    if job.final_model:
        params["final_model"] = lambda wc: p1_final(wc.model)
    if job.fanout:
        params["pairs"] = pair_segments(job)
    if CACHE_ON and job.cache:
        params["cache_key"] = cache_key
    return params


def _layer(wildcards):
    """The job's layer (None for jobs without a layer wildcard)."""
    return int(wildcards.layer) if "layer" in wildcards.keys() else None


def design_param(dpath):
    """A ``pk/...`` config value as the job's model sees it (its design; the global value
    when the model has none)."""

    def inner(wildcards):
        return designs.lookup(config, wildcards.model, dpath, _layer(wildcards))

    return inner


def pair_segments(job):
    """The layer pairs of one part (headgeom.schedule.fanout): params, so that a changed ceiling
    or sample block size reruns exactly the parts whose pairs changed."""

    def inner(wildcards, input):
        with open(input.manifest) as fh:
            f = json.load(fh)["fields"]
        mc = designs.model_config(config, wildcards.model)
        return [list(s) for s in fanout.part(job, f, mc, int(wildcards.part))]

    return inner


def OUTPUT_FILES(out):
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


def job_gpus(job):
    """GPUs a per-layer job asks a scheduler for (resource `gpu`; the SLURM plugin turns it into
    sbatch --gpus): one for the jobs that run their kernels through the configured backend
    (they read `device`) when `device` is cuda[:N]; none otherwise. Whether CUDA is really
    there is checked where the job runs (headgeom.core.backend)."""
    return int(
        "device" in job.params.values() and str(config["device"]).startswith("cuda")
    )


def OUTPUT_BUILDER_MODELS(out):
    """The models an output's builder covers (headgeom.targets.builder_models)."""
    return targets.builder_models(out, config)


# `snakemake --report` renders each caption with its job's params: there they are the values
# the output was built with (its .prov.json), not those of the config given to --report.
REPORTING = any(a == "--report" or a.startswith("--report=") for a in sys.argv)
# the landing page (workflow/report/workflow.rst) names the code it describes
if REPORTING:
    config["_report_code"] = code_version()


def _built_params(out):
    """The params recorded in an output's provenance sidecar ({} when there is none)."""
    try:
        with open(out.paths()["prov"]) as fh:
            return json.load(fh).get("params") or {}
    except (OSError, ValueError):
        return {}


def OUTPUT_PARAMS(out):
    """The config values the output reads (its registry entry's params) and derived ones;
    under --report, those it was built with where its provenance records them."""
    params = {k: lookup(dpath=d, within=config) for k, d in out.params.items()}
    if "pairs" in out.derived:
        params["pairs"] = _pairs()
    if REPORTING:
        built = _built_params(out)
        params.update({k: built[k] for k in params if k in built})
    return params
