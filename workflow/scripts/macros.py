# The papers' LaTeX macros (headgeom.rules.scripts.macros).
from headgeom.rules.jobserver import run_script

run_script("macros", snakemake)
