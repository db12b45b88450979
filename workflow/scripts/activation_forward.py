from pathlib import Path

from headgeom.jobs.logs import to_log

from headgeom.jobs.activation import forward_job
from headgeom.jobs.families import FORWARD

log = to_log(snakemake)
wc = snakemake.wildcards
params = {
    "device": snakemake.params.device,
    "bos": snakemake.params.bos,
    "weight_rtol": snakemake.params.weight_rtol,
    "n_windows": int(wc.nwin),
    "window": int(wc.win),
}
forward_job(wc.model, dict(snakemake.params.entry), Path(snakemake.input.manifest).parent, wc.corpus,
            dict(snakemake.params.corpus_entry), snakemake.output[0], params, log=log,
            step=FORWARD.name)
