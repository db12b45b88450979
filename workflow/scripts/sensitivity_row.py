# One alternative's row of the choice sensitivity (rules sensitivity_tables, sensitivity_shards;
# headgeom.verify.sensitivity): its tables rebuilt, the ledger judged on them.
from pathlib import Path

from headgeom import layout
from headgeom.core.logs import to_log
from headgeom.verify.sensitivity import alternative_job

log = to_log(snakemake)
alt = snakemake.wildcards.alt
if "shards" in snakemake.output.keys():  # a directory output: there even when nothing is recomputed
    Path(snakemake.output.shards).mkdir(parents=True, exist_ok=True)
alternative_job(alt, snakemake.input.ledger, Path.cwd(), list(snakemake.params.models), snakemake.output.row,
                list(snakemake.params.tables), layout.sensitivity_dir(alt),
                forwarded=snakemake.params.kind == "forward", progress=log.progress,
                inputs=[*snakemake.input.tables, *snakemake.input.provs])
