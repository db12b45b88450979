from headgeom.jobs.logs import to_log

from headgeom.activation import report

log = to_log(snakemake)
out = dict(snakemake.output.items())
params = {k: v for k, v in snakemake.params.items() if k != "models"}
models = list(snakemake.params.models)
shards = list(snakemake.input.shards)

def pick(prefix):
    return {k[len(prefix):]: v for k, v in out.items() if k.startswith(prefix)}

if snakemake.rule == "activation_natural_return_outputs":
    table = {k: out[k] for k in ("csv", "md", "tex", "prov")}
    report.natural_return_table(shards, list(snakemake.input.closure), models, table, params)
    report.natural_return_figure(shards, list(snakemake.input.closure), models, pick("fig_"), params)
else:
    table = {k: out[k] for k in ("csv", "md", "tex", "prov")}
    report.read_paths_table(shards, models, table, params)
    report.read_paths_fig4(shards, models, pick("fig4_"), params)
    report.read_paths_fig5(shards, models, pick("fig5_"), params)
log(f"[{snakemake.rule}] {len(shards)} shards, {len(models)} models")
