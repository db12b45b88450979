# The table of the choice sensitivity (rule choice_sensitivity; headgeom.publish.choice_sensitivity):
# the alternatives' rows, in the table's order.
from headgeom.core.logs import to_log
from headgeom.publish.choice_sensitivity import aggregate_job

log = to_log(snakemake)
t = aggregate_job(snakemake.input.ledger, list(snakemake.params.models), list(snakemake.params.alternatives),
                  list(snakemake.input.rows), dict(snakemake.output.items()), progress=log)
log(f"[choice_sensitivity] {len(t.rows)} alternatives; {sum(r['changed'] or 0 for r in t.rows)} status changes")
