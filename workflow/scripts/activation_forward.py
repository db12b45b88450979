from pathlib import Path

from headgeom.core.logs import to_log

from headgeom.jobs.activation import forward_job, windows_job

log = to_log(snakemake)
wc = snakemake.wildcards
source = list(snakemake.input.source) if "source" in snakemake.input.keys() else []
params = {
    "device": snakemake.params.device,
    "bos": snakemake.params.bos,
    "weight_rtol": snakemake.params.weight_rtol,
    "n_windows": int(wc.nwin),
    "window": int(wc.win),
}
if source:  # a longer pass of the same corpus and window length: its first windows
    windows_job(source[0], snakemake.output[0], params["n_windows"], log=log)
else:
    forward_job(wc.model, dict(snakemake.params.entry), Path(snakemake.input.manifest).parent, wc.corpus,
                dict(snakemake.params.corpus_entry), snakemake.output[0], params, log=log,
                step=snakemake.rule)  # the step's name: the rule's, as registered (schedule.families.STEPS)
