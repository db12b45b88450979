import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.pk import pk_report_job  # noqa: E402

log = to_log(snakemake)
p = snakemake.params
inputs = {fam: list(snakemake.input[fam]) for fam in p.families}
params = {"null_types": list(p.null_types), "pairs": [list(x) for x in p.pairs]}
pk_report_job(p.name, inputs, list(snakemake.input.manifests), list(p.models), dict(snakemake.output.items()), params)
log(f"[{p.name}] from {sum(len(v) for v in inputs.values())} shards")
