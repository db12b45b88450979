# results/summary.md (headgeom.rules.scripts.summary).
from headgeom.rules.jobserver import run_script

run_script("summary", snakemake)
