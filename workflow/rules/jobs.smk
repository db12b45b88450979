# Every per-layer job, generated from the shard-family registry (headgeom.schedule.families.JOBS):
# its shards, log, cost model (resources for SLURM) and the config keys it reads as params
# (headgeom.rules.jobs). Adding a family is one job function + one registry entry; nothing here changes.
from headgeom.schedule.families import JOBS
from headgeom.rules.fetch import cache_on
from headgeom.rules.jobs import (
    job_command,
    job_inputs,
    job_outputs,
    job_params,
    job_resources,
    job_threads,
)

for _job in JOBS.values():

    rule:
        name:
            _job.name
        input:
            **job_inputs(config, _job),
        output:
            **job_outputs(_job),
        log:
            _job.log,
        cache: cache_on(workflow) and _job.cache
        conda:
            "../../envs/headgeom.yaml"
        threads: job_threads(config, _job)
        resources:
            **job_resources(config, _job),
        params:
            **job_params(workflow, config, _job),
        shell:
            job_command(workflow)
