# One forward pass rerun with a window-cutting alternative (rule sensitivity_forward; headgeom.verify.sensitivity).
from pathlib import Path

from headgeom.core.logs import to_log
from headgeom.verify.sensitivity import forward_alternative_job

log = to_log(snakemake)
wc = snakemake.wildcards
source = list(snakemake.input.source) if "source" in snakemake.input.keys() else []
forward_alternative_job(wc.alt, wc.model, wc.corpus, int(wc.nwin), int(wc.win), dict(snakemake.params.entry),
                        dict(snakemake.params.corpus_entry), Path.cwd(), snakemake.output[0], log=log.progress,
                        source=source[0] if source else None)
