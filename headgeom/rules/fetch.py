"""The fetch checkpoint (workflow/rules/fetch.smk) and the between-workflow cache.

Between-workflow cache (``--cache`` + ``$SNAKEMAKE_OUTPUT_CACHE``; docs/cluster.md): Snakemake keys
a cached output by the rule's script, params, software and upstream jobs, not by wildcards or by
the headgeom package, so with ``--cache`` the cacheable rules also get a ``cache_key`` param naming
the job's wildcards, the package source hash and the tensors' sha256 (content addressing).
"""

from __future__ import annotations

import json
from pathlib import Path

from headgeom.core.provenance import code_version
from headgeom.schedule import costs
from headgeom.schedule.families import FETCH, JOBS

#: the keys of a ``models[...]`` entry that locate its checkpoint (headgeom.io.sources.open_source
#: reads them): the fetch's and the forward passes' params, so that editing a model's notes,
#: tables, pair or lineage refetches nothing and reruns none of its jobs
FETCH_KEYS = ("source", "path", "repo_id", "revision", "package")


def checkpoint_entry(config: dict):
    """Param: the model's entry, only the keys that locate its checkpoint (``FETCH_KEYS``)."""
    return lambda wc: {k: v for k, v in config["models"][wc.model].items() if k in FETCH_KEYS}


def fetch_cost(config: dict, key: str):
    """The fetch's mem_mb / runtime from the model's shape (headgeom.schedule.costs.fetch), times the
    attempt as the per-layer jobs' (headgeom.rules.jobs.job_cost)."""
    return lambda wildcards, attempt: costs.grow(FETCH.cost(None, config, wildcards), attempt)[key]


def cache_on(workflow) -> bool:
    """Whether this run caches between workflows (``--cache``)."""
    return workflow.workflow_settings.cache is not None


def widen_bare_cache(workflow) -> None:
    """Snakemake 9.27 hands ``--cache`` on to remote jobs (the SLURM jobstep, where the cache is read
    and written) only when it names the cached steps; a bare ``--cache`` would cache nothing on a
    cluster. So a bare ``--cache`` is turned into the list of cacheable rules (the same set a local
    run caches)."""
    if cache_on(workflow) and not workflow.workflow_settings.cache:
        workflow.workflow_settings.cache = [FETCH.name] + [j.name for j in JOBS.values() if j.cache]


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


def source_key(config: dict):
    """The fetch's cache key: a local checkpoint's files (name, size, mtime) join it, so a changed
    local checkpoint is fetched again; hub sources are keyed by repo_id + revision."""

    def inner(wildcards):
        entry = config["models"][wildcards.model]
        key = {"code": code_version()["source_sha256"]}
        if entry.get("source") == "local":
            root = Path(entry["path"])
            files = sorted(root.rglob("*")) if root.is_dir() else [root]
            key["files"] = [
                [str(f.relative_to(root) if root.is_dir() else f.name), st.st_size, st.st_mtime_ns]
                for f in files
                if f.is_file()
                for st in [f.stat()]
            ]
        return key

    return inner


def fetch_params(workflow, config: dict) -> dict:
    """The fetch's params: the locating keys of the model's entry, and under ``--cache`` its key."""
    return {**({"cache_key": source_key(config)} if cache_on(workflow) else {}), "entry": checkpoint_entry(config)}
