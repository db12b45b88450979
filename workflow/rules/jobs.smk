# Every per-layer job, generated from the shard-family registry (headgeom.schedule.families.JOBS):
# its shards, log, cost model (resources for SLURM) and the config keys it reads as params.
# Adding a family is one job function + one registry entry; nothing here changes.


for _job in FAMILY_JOBS.values():

    rule:
        name:
            _job.name
        input:
            **JOB_INPUTS(_job),
        output:
            **{f.output: f.path for f in _job.families},
        log:
            _job.log,
        cache: CACHE_ON and _job.cache
        conda:
            "../../envs/headgeom.yaml"
        threads: 1
        resources:
            mem_mb=job_cost(_job, "mem_mb"),
            runtime=job_cost(_job, "runtime"),
            cpus_per_task=1,
            gpu=job_gpus(_job),
            attempt=job_attempt,
        params:
            **JOB_PARAMS(_job),
            job=_job.name,
        script:
            "../scripts/job.py"
