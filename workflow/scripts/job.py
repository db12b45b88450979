# One per-layer job of the shard-family registry (headgeom.schedule.families.JOBS), named by params.job.
import os

from headgeom.core.provenance import set_run
from headgeom.schedule.families import load_plugins, run_job
from headgeom.core.logs import to_log

load_plugins()  # a HEADGEOM_PLUGINS job runs here too: this process read no Snakefile
log = to_log(snakemake)
params = dict(snakemake.params.items())
job = params.pop("job")
params.pop("cache_key", None)  # the cache's key (headgeom.rules.fetch.cache_key), not an input of the job
attempt = int(snakemake.resources.get("attempt", 1))
set_run(attempt=attempt, rule=job, mem_mb=snakemake.resources.get("mem_mb"),
        runtime_min=snakemake.resources.get("runtime"), slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        slurm_array_job_id=os.environ.get("SLURM_ARRAY_JOB_ID"),
        slurm_array_task_id=os.environ.get("SLURM_ARRAY_TASK_ID"))
run_job(job, dict(snakemake.input.items()), dict(snakemake.output.items()),
        dict(snakemake.wildcards.items()), params, log=log)
