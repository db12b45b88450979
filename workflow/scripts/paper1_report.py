import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.reports import paper1 as report_paper1  # noqa: E402

log = to_log(snakemake)
kind, name = snakemake.rule.split("_", 1)  # table_paper1_x / figure_paper1_x
params = {k: v for k, v in snakemake.params.items() if k != "models"}
inputs = {k: list(v) for k, v in snakemake.input.items() if k in ("heads", "pairs", "capacity")}
job = report_paper1.table_job if kind == "table" else report_paper1.figure_job
job(name, inputs, list(snakemake.params.models), dict(snakemake.output.items()), params)
log(f"[{kind} {name}] from {sum(len(v) for v in inputs.values())} shards")
