# One per-layer job of the shard-family registry (headgeom.jobs.families.JOBS), named by params.job.
from headgeom.jobs.families import run_job
from headgeom.jobs.logs import to_log

log = to_log(snakemake)
params = dict(snakemake.params.items())
run_job(params.pop("job"), dict(snakemake.input.items()), dict(snakemake.output.items()),
        dict(snakemake.wildcards.items()), params, log=log)
