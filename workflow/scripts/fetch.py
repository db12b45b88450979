# A model's attention tensors into its tensor store (headgeom.rules.scripts.fetch_tensors).
from headgeom.rules.jobserver import run_script

run_script("fetch_tensors", snakemake)
