from pathlib import Path

from headgeom.io.files import write_text
from headgeom.jobs.logs import to_log
from headgeom.verify.summary import summary_markdown

log = to_log(snakemake)
root = Path(snakemake.output.md).parents[1]  # the work directory (results/summary.md)
write_text(snakemake.output.md, summary_markdown(root, list(snakemake.params.models)))
log(f"[summary] {snakemake.output.md} for {', '.join(snakemake.params.models)}")
