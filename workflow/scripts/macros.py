from pathlib import Path

from headgeom.core.logs import to_log
from headgeom.publish.macros import config_hash, macros_job

log = to_log(snakemake)
macros_job(snakemake.input.ledger, Path(snakemake.input.claims).parent, list(snakemake.params.models),
           list(snakemake.params.cells), config_hash(snakemake.config), dict(snakemake.output.items()))
log(f"[macros] {snakemake.output.claims}, {snakemake.output.cells} ({len(snakemake.params.cells)} cells)")
