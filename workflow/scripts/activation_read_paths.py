import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.activation.jobs import read_paths_job  # noqa: E402

log = to_log(snakemake)
params = {"kinds": list(snakemake.params.kinds), "eps_exact": snakemake.params.eps_exact,
          "rank_rtol": snakemake.params.rank_rtol}
read_paths_job(Path(snakemake.input.manifest).parent, snakemake.input.acts, int(snakemake.wildcards.layer),
               snakemake.output[0], params, log=log)
