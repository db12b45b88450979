import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.paper1 import capacity_job  # noqa: E402

log = to_log(snakemake)
params = dict(snakemake.params.items())
capacity_job(Path(snakemake.input.manifest).parent, Path(snakemake.input.final_manifest).parent,
             int(snakemake.wildcards.layer), snakemake.output[0], params, log=log)
