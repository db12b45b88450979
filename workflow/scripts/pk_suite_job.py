import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs import pk as jobs  # noqa: E402

log = to_log(snakemake)
store = Path(snakemake.input.manifest).parent
p = dict(snakemake.params.items())
if snakemake.rule == "pk_cross_layer":
    jobs.pk_cross_job(store, int(snakemake.wildcards.layer), snakemake.output[0], p, log=log)
elif snakemake.rule == "pk_null_within":
    jobs.pk_null_within_job(store, int(snakemake.wildcards.layer), p["samples"], snakemake.output[0], p, log=log)
elif snakemake.rule == "pk_null_cross":
    jobs.pk_null_cross_job(store, p["samples"], snakemake.output[0], p, log=log)
else:
    raise ValueError(snakemake.rule)
