from pathlib import Path

from headgeom.jobs.logs import to_log

from headgeom.activation.jobs import read_paths_job

log = to_log(snakemake)
params = {"kinds": list(snakemake.params.kinds), "eps_exact": snakemake.params.eps_exact,
          "rank_rtol": snakemake.params.rank_rtol}
read_paths_job(Path(snakemake.input.manifest).parent, snakemake.input.acts, int(snakemake.wildcards.layer),
               snakemake.output[0], params, log=log)
