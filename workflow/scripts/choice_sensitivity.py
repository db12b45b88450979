# The table of the choice sensitivity (rule choice_sensitivity; headgeom.rules.scripts.choice_sensitivity).
from headgeom.rules.jobserver import run_script

run_script("choice_sensitivity", snakemake)
