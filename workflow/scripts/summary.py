from headgeom.core.logs import to_log
from headgeom.publish.summary import summary_job

log = to_log(snakemake)
summary_job(snakemake.output.md, list(snakemake.params.models))  # results/summary.md of this work directory
log(f"[summary] {snakemake.output.md} for {', '.join(snakemake.params.models)}")
