# A model's attention tensors into its tensor store (headgeom.rules.scripts.fetch).
from headgeom.rules.jobserver import run_script

run_script("fetch", snakemake)
