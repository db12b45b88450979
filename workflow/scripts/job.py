# One per-layer job of the shard-family registry (headgeom.jobs.families.JOBS), named by params.job.
import os

from headgeom.core.provenance import set_run
from headgeom.jobs.families import run_job
from headgeom.jobs.logs import to_log

log = to_log(snakemake)
params = dict(snakemake.params.items())
job = params.pop("job")
params.pop("cache_key", None)  # the cache's key (workflow/rules/common.smk), not an input of the job
attempt = int(snakemake.resources.get("attempt", 1))
set_run(attempt=attempt, rule=job, mem_mb=snakemake.resources.get("mem_mb"),
        runtime_min=snakemake.resources.get("runtime"), slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        slurm_array_job_id=os.environ.get("SLURM_ARRAY_JOB_ID"),
        slurm_array_task_id=os.environ.get("SLURM_ARRAY_TASK_ID"))
# Test-only fault injection (tests/workflow/test_retries.py, test_slurm.py): fail the first
# attempt of the named rule, so that a retry with grown resources can be observed.
if attempt == 1 and job in os.environ.get("HEADGEOM_TEST_FAIL_FIRST_ATTEMPT", "").split(","):
    raise RuntimeError(f"{job}: attempt 1 failed on purpose (HEADGEOM_TEST_FAIL_FIRST_ATTEMPT)")
# Test-only memory load (tests/workflow/test_slurm.py): on every attempt, hold <MB> of touched
# memory for a few seconds, so that SLURM's memory enforcement kills an attempt whose request is
# smaller and lets one with a grown request finish.
ballast = dict(kv.split("=") for kv in os.environ.get("HEADGEOM_TEST_MEMORY_MB", "").split(",") if kv)
if job in ballast:
    import time

    import numpy as np

    held = np.ones(int(ballast[job]) * 2**20 // 8)
    time.sleep(4)  # longer than two samples of JobAcctGatherFrequency=task=1
run_job(job, dict(snakemake.input.items()), dict(snakemake.output.items()),
        dict(snakemake.wildcards.items()), params, log=log)
