import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.paper1 import heads_job  # noqa: E402

log = to_log(snakemake)
params = dict(snakemake.params.items())
heads_job(Path(snakemake.input.manifest).parent, int(snakemake.wildcards.layer), snakemake.output.heads,
          snakemake.output.pairs, params, log=log)
