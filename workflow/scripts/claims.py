from pathlib import Path

from headgeom.jobs.logs import to_log
from headgeom.verify.claims import claims_job

log = to_log(snakemake)
t = claims_job(snakemake.input.ledger, Path(snakemake.output.csv).parent, list(snakemake.params.models),
               dict(snakemake.output.items()))
log(f"[claims] {len(t.rows)} claims from {snakemake.input.ledger}; {t.notes}")
