from pathlib import Path

from headgeom.core.logs import to_log
from headgeom.io.fetch import fetch_model

log = to_log(snakemake)
fetch_model(snakemake.wildcards.model, dict(snakemake.params.entry), Path(snakemake.output.manifest).parent, log=log)
