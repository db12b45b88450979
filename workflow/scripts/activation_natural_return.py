from pathlib import Path

from headgeom.jobs.logs import to_log

from headgeom.activation.jobs import natural_return_job

log = to_log(snakemake)
natural_return_job(Path(snakemake.input.manifest).parent, snakemake.input.acts, int(snakemake.wildcards.layer),
                   snakemake.output[0], {"endpoint": snakemake.params.endpoint}, log=log)
