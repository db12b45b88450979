# The sensitivity of the ledger to the reconstructed choices (headgeom.verify.sensitivity): one
# alternative's row (rules sensitivity_tables, sensitivity_shards) or the table of them all
# (rule choice_sensitivity).
from pathlib import Path

from headgeom import layout
from headgeom.jobs.logs import to_log
from headgeom.verify.sensitivity import aggregate_job, alternative_job

log = to_log(snakemake)
if snakemake.rule == "choice_sensitivity":
    t = aggregate_job(snakemake.input.ledger, list(snakemake.params.models), list(snakemake.params.alternatives),
                      list(snakemake.input.rows), dict(snakemake.output.items()), progress=log)
    log(f"[choice_sensitivity] {len(t.rows)} alternatives; {sum(r['changed'] or 0 for r in t.rows)} status changes")
else:
    alt = snakemake.wildcards.alt
    if "shards" in snakemake.output.keys():  # a directory output: there even when nothing is recomputed
        Path(snakemake.output.shards).mkdir(parents=True, exist_ok=True)
    alternative_job(alt, snakemake.input.ledger, Path.cwd(), list(snakemake.params.models), snakemake.output.row,
                    list(snakemake.params.tables), layout.sensitivity_dir(alt),
                    forwarded=snakemake.params.kind == "forward", progress=log.progress,
                    inputs=[*snakemake.input.tables, *snakemake.input.provs])
