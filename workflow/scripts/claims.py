# The claims ledger's table and page (headgeom.rules.scripts.claims).
from headgeom.rules.jobserver import run_script

run_script("claims", snakemake)
