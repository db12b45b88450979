import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.reports.claims import claims_job  # noqa: E402

log = to_log(snakemake)
t = claims_job(snakemake.input.ledger, Path(snakemake.output.csv).parent, list(snakemake.params.models),
               dict(snakemake.output.items()))
log(f"[claims] {len(t.rows)} claims from {snakemake.input.ledger}; {t.notes}")
