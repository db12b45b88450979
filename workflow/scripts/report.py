import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs.pk import figure_job, table_job  # noqa: E402

log = to_log(snakemake)
what, name = snakemake.rule.split("_", 1)  # table_<name> or figure_<name>
job = {"table": table_job, "figure": figure_job}[what]
params = {k: v for k, v in snakemake.params.items() if k != "models"}
manifests = None
if "manifests" in snakemake.input.keys():
    manifests = {Path(p).parent.name: p for p in snakemake.input.manifests}
job(name, list(snakemake.input.shards), list(snakemake.params.models), dict(snakemake.output.items()), params, manifests)
log(f"[{what} {name}] from {len(snakemake.input.shards)} shards")
