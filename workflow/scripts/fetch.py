import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.io.fetch import fetch_model  # noqa: E402

log = to_log(snakemake)
fetch_model(snakemake.wildcards.model, dict(snakemake.params.entry), Path(snakemake.output.manifest).parent, log=log)
