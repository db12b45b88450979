from pathlib import Path

from headgeom.core.logs import to_log
from headgeom.publish.claims import claims_job
from headgeom.publish.ledger_page import write_ledger_page

log = to_log(snakemake)
tables = Path(snakemake.output.csv).parent
outputs = {k: v for k, v in snakemake.output.items() if k != "html"}
t = claims_job(snakemake.input.ledger, tables, list(snakemake.params.models), outputs)
# the ledger page (filterable, each row linked to the table row it reads) in place of the plain table page
write_ledger_page(snakemake.output.html, snakemake.input.ledger, t, tables)
log(f"[claims] {len(t.rows)} claims from {snakemake.input.ledger}; {t.notes}")
