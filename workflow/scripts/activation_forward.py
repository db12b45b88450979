import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.activation.jobs import forward_job  # noqa: E402

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
            dict(snakemake.params.corpus_entry), snakemake.output[0], params, log=log)
