"""The per-layer jobs (workflow/rules/jobs.smk: one rule per job of headgeom.schedule.families.JOBS):
their inputs, params and resources, and the shards one family has for a set of models.

Layer counts come from the fetched manifests: ``fetch`` is a checkpoint, so an input function that
needs a model's shape asks ``checkpoints.fetch`` for it (``model_fields``)."""

from __future__ import annotations

import inspect
import json

from snakemake.ioutils import lookup

from headgeom import layout, targets
from headgeom.schedule import costs, designs, fanout
from headgeom.schedule.families import SHARD_FAMILIES, activation_dir
from headgeom.rules.fetch import cache_key, cache_on


def model_fields(checkpoints, model: str) -> dict:
    """The model's shape, known once its tensors are fetched (fetch is a checkpoint)."""
    return costs._fields(checkpoints.fetch.get(model=model).output.manifest)


def family_shards(config: dict, checkpoints, name: str, models: list[str], by_design: bool = True):
    """Input function: every shard of one family (headgeom.schedule.families) for the models, model by
    model, as each model's design schedules them (headgeom.schedule.designs; ``by_design=False``: the global
    design, every layer, whatever the design says)."""
    cfg = config if by_design else designs.global_design(config)

    def inner(wildcards):
        paths = []
        for m in models:
            if designs.runs(SHARD_FAMILIES[name].job, cfg, m):
                paths += designs.shard_paths(name, cfg, m, model_fields(checkpoints, m))
        return paths

    return inner


def layer_of(wildcards) -> int | None:
    """The job's layer (None for jobs without a layer wildcard)."""
    return int(wildcards.layer) if "layer" in wildcards.keys() else None


def job_cost(config: dict, job, key: str):
    """mem_mb / runtime of one job from the model's shape (the job's cost model in
    headgeom.schedule.families; docs/costs.md), times the attempt: a job that died for memory or
    time is retried (profile `retries`) with twice, three times, ... the request."""

    def inner(wildcards, input, attempt):
        mc = designs.model_config(config, wildcards.model, layer_of(wildcards))
        return costs.grow(job.cost(input.manifest, mc, wildcards), attempt)[key]

    return inner


def job_attempt(wildcards, attempt):
    """The attempt number as a resource: the job records it in its shards' provenance."""
    return attempt


def job_gpus(config: dict, job) -> int:
    """GPUs a per-layer job asks a scheduler for (resource `gpu`; the SLURM plugin turns it into
    sbatch --gpus): one for the jobs that run their kernels through the configured backend
    (they read `device`) when `device` is cuda[:N]; none otherwise. Whether CUDA is really
    there is checked where the job runs (headgeom.core.backend)."""
    return int("device" in job.params.values() and str(config["device"]).startswith("cuda"))


def job_threads(config: dict, job):
    """The cores one job holds (the rule's ``threads``): its registry entry's ``threads`` under the model's
    design and shape (its manifest), else one. Snakemake hands them to the job's BLAS (the job's environment)
    and caps them at ``--cores``."""
    if job.threads is None:
        return 1

    def inner(wildcards, input):
        return job.threads(designs.model_config(config, wildcards.model), costs._fields(input.manifest))

    return inner


def job_resources(config: dict, job) -> dict:
    """A job's resources: its cost model's memory and time, its cores, its GPUs, the attempt."""
    return {
        "mem_mb": job_cost(config, job, "mem_mb"),
        "runtime": job_cost(config, job, "runtime"),
        "cpus_per_task": lambda wildcards, threads: threads,
        "gpu": job_gpus(config, job),
        "attempt": job_attempt,
    }


def final_model(config: dict):
    """Input function: the checkpoint whose closure fixes a model's capacity groups (its lineage's
    last; else itself; headgeom.targets.final_model)."""
    return lambda wc: targets.final_model(config, wc.model)


def job_inputs(config: dict, job) -> dict:
    """The tensor store of the job's model (and of its lineage's final checkpoint; and the
    forward pass's activations for the activation stage's jobs)."""
    store = {"manifest": layout.MANIFEST, "tensors": layout.TENSORS}
    if job.final_model:
        final = final_model(config)
        store["final_manifest"] = lambda wc: layout.manifest(final(wc))
        store["final_tensors"] = lambda wc: layout.tensors(final(wc))
    if job.activations:
        store["acts"] = activation_dir(config, job.activations)
    return store


def design_param(config: dict, dpath: str):
    """A ``pk/...`` config value as the job's model sees it (its design; the global value
    when the model has none)."""
    return lambda wildcards: designs.lookup(config, wildcards.model, dpath, layer_of(wildcards))


def block_samples(config: dict, job):
    """A block's sample indices are its params (from the model's design; a fanned-out job's block size from
    the model's shape, its manifest): growing the sample count adds blocks and leaves the finished ones
    untouched."""
    if not job.fanout:  # reads no input: Snakemake leaves a param that reads one out of its change check
        return lambda wildcards: designs.samples(job, config, wildcards.model, int(wildcards.block), None,
                                                layer_of(wildcards))
    return lambda wildcards, input: designs.samples(job, config, wildcards.model, int(wildcards.block),
                                                   costs._fields(input.manifest), layer_of(wildcards))


def pair_segments(config: dict, job):
    """The layer pairs of one part (headgeom.schedule.fanout): params, so that a changed ceiling
    or sample block size reruns exactly the parts whose pairs changed."""

    def inner(wildcards, input):
        mc = designs.model_config(config, wildcards.model)
        return [list(s) for s in fanout.part(job, costs._fields(input.manifest), mc, int(wildcards.part))]

    return inner


def job_params(workflow, config: dict, job) -> dict:
    """The config values the job reads (and nothing else: editing another key reruns nothing);
    ``pk/...`` keys as the model's design resolves them (headgeom.schedule.designs); its sample block,
    lineage's final checkpoint, layer pairs and cache key where it has them; its name."""
    params = {
        k: design_param(config, d) if d.startswith("pk/") else lookup(dpath=d, within=config)
        for k, d in job.params.items()
    }
    if job.blocks:
        params["samples"] = block_samples(config, job)
    if job.final_model:
        params["final_model"] = final_model(config)
    if job.fanout:
        params["pairs"] = pair_segments(config, job)
    params["job"] = job.name
    params["spec"] = job_spec(params)  # the job's values for its command (job_command); not the cache's key
    if cache_on(workflow) and job.cache:
        params["cache_key"] = cache_key
    return params


def _param_value(value, wildcards, input, output):
    """A param as Snakemake evaluates it: a function called with the wildcards and what else it names."""
    if not callable(value):
        return value
    names = inspect.signature(value).parameters
    return value(wildcards, **{k: v for k, v in (("input", input), ("output", output)) if k in names})


def job_spec(params: dict):
    """The params entry ``spec``: the job's input, output, wildcards and other params as JSON, which its
    command hands to the job (headgeom.rules.jobclient); a ConfigError when that is too long for a
    command line."""
    from headgeom.core.errors import ConfigError
    from headgeom.rules.jobclient import SPEC_MAX_BYTES, named

    defs = dict(params)

    def inner(wildcards, input, output):
        values = {k: _param_value(v, wildcards, input, output) for k, v in defs.items()}
        spec = json.dumps({"input": named(dict(input.items())), "output": named(dict(output.items())),
                           "wildcards": named(dict(wildcards.items())), "params": named(values)})
        if len(spec) > SPEC_MAX_BYTES:
            raise ConfigError(f"{values['job']} ({dict(wildcards.items())}): its params are {len(spec):,} bytes of "
                              f"JSON, more than a command line takes ({SPEC_MAX_BYTES:,})")
        return spec

    return inner


def job_command(workflow) -> str:
    """A per-layer job's shell command: its values handed to the job by headgeom.rules.jobclient, a
    standard-library module that starts in milliseconds (no Snakemake import before the job, as a
    ``script:`` job has), through the local run's job server where there is one. The same text for
    every job and every install: Snakemake formats a rule's ``shell:`` when the job runs (after the
    rule file's loop), and reruns a rule whose command text changed, so the interpreter is the
    environment's HEADGEOM_PYTHON (the workflow's own, set by headgeom.rules.start) rather than a path;
    ``python`` where the job runs in a conda or container environment."""
    settings = getattr(workflow, "deployment_settings", None)
    python = "python" if settings is not None and settings.deployment_method else '"${{HEADGEOM_PYTHON:-python}}"'
    return (f"{python} -m headgeom.rules.jobclient per_layer_job "
            "{params.spec:q} {log:q} {resources.attempt} {resources.mem_mb} {resources.runtime} {threads} {params.job}")


def job_outputs(job) -> dict:
    """The job's shards: one named output per family it writes."""
    return {f.output: f.path for f in job.families}
