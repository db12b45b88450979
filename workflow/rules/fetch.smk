# config models[...] keys headgeom.io.sources.open_source reads
FETCH_KEYS = ("source", "path", "repo_id", "revision", "package")


def fetch_cost(key):
    """The fetch's mem_mb / runtime from the model's shape (headgeom.schedule.costs.fetch), times the
    attempt as the per-layer jobs' (job_cost)."""
    return lambda wildcards, attempt: costs.grow(
        FETCH.cost(None, config, wildcards), attempt
    )[key]


checkpoint fetch:
    output:
        **FETCH.outputs,
    log:
        FETCH.log,
    cache: CACHE_ON
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=fetch_cost("mem_mb"),
        runtime=fetch_cost("runtime"),
        cpus_per_task=1,
    params:
        **({"cache_key": source_key} if CACHE_ON else {}),
        # only the keys that locate the checkpoint: editing a model's notes, tables, pair or
        # lineage (config/models.yaml) does not refetch it and rerun its jobs
        entry=lambda wc: {
            k: v for k, v in config["models"][wc.model].items() if k in FETCH_KEYS
        },
    script:
        "../scripts/fetch.py"
