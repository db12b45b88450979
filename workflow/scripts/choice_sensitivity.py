# The sensitivity of the ledger to the reconstructed choices (headgeom.verify.sensitivity).
from pathlib import Path

from headgeom.jobs.logs import to_log
from headgeom.verify.sensitivity import sensitivity_job

log = to_log(snakemake)
sources = {"models": dict(snakemake.params.model_entries), "texts": dict(snakemake.params.texts)}
t = sensitivity_job(snakemake.input.ledger, Path.cwd(), list(snakemake.params.models), dict(snakemake.output.items()),
                    sources=sources, workers=snakemake.threads, tables=list(snakemake.params.tables), progress=log)
log(f"[choice_sensitivity] {len(t.rows)} alternatives; {sum(r['changed'] or 0 for r in t.rows)} status changes")
