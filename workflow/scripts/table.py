import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.jobs import table_job  # noqa: E402

log = to_log(snakemake)
name = snakemake.rule.removeprefix("table_")
params = {k: v for k, v in snakemake.params.items() if k != "models"}
manifests = None
if "manifests" in snakemake.input.keys():
    manifests = {Path(p).parent.name: p for p in snakemake.input.manifests}
table_job(name, list(snakemake.input.shards), list(snakemake.params.models), dict(snakemake.output.items()), params, manifests)
log(f"[table {name}] from {len(snakemake.input.shards)} shards")
