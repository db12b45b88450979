# One alternative's row of the choice sensitivity (rules sensitivity_tables, sensitivity_shards;
# headgeom.rules.scripts.sensitivity_row).
from headgeom.rules.jobserver import run_script

run_script("sensitivity_row", snakemake)
