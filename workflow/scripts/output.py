# One table or figure of the output registry (headgeom.outputs), named by params.output (kind, name)
# (headgeom.rules.scripts.output; forked by the local run's job server where there is one).
from headgeom.rules.jobserver import run_script

run_script("output", snakemake)
