from pathlib import Path

from headgeom.io.files import write_text
from headgeom.jobs.logs import to_log
from headgeom.verify.claims import claims_job, load_ledger
from headgeom.verify.ledger_page import ledger_page, ledger_rows

log = to_log(snakemake)
tables = Path(snakemake.output.csv).parent
outputs = {k: v for k, v in snakemake.output.items() if k != "html"}
t = claims_job(snakemake.input.ledger, tables, list(snakemake.params.models), outputs)
# the ledger page (filterable, each row linked to the table row it reads) in place of the plain table page
rows = ledger_rows(load_ledger(snakemake.input.ledger), t.rows, tables)
write_text(snakemake.output.html, ledger_page(rows, t.caption, t.notes))
log(f"[claims] {len(t.rows)} claims from {snakemake.input.ledger}; {t.notes}")
