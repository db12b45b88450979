import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.pk import pk_job  # noqa: E402

log = to_log(snakemake)
params = {
    "kinds": list(snakemake.params.kinds),
    "rank_rtol": snakemake.params.rank_rtol,
    "self_permutations": snakemake.params.self_permutations,
}
pk_job(Path(snakemake.input.manifest).parent, int(snakemake.wildcards.layer), snakemake.output.pairs, params,
       out_self=snakemake.output.self_overlap, log=log)
