import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.pk import closure_job  # noqa: E402

log = to_log(snakemake)
params = {"identity_rtol": snakemake.params.identity_rtol, "rank_rtol": snakemake.params.rank_rtol}
closure_job(Path(snakemake.input.manifest).parent, int(snakemake.wildcards.layer), snakemake.output[0], params, log=log)
