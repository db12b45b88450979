# One table or figure of the output registry (headgeom.outputs), named by params.output (kind, name).
from headgeom.core.logs import to_log
from headgeom.outputs import build_output

log = to_log(snakemake)
params = dict(snakemake.params.items())
(kind, name), models = params.pop("output"), params.pop("models")
inputs = {k: list(v) for k, v in snakemake.input.items() if k != "manifests"}
build_output(kind, name, inputs, list(snakemake.input.manifests), list(models), dict(snakemake.output.items()), params)
log(f"[{kind} {name}] from {sum(len(v) for v in inputs.values())} shards")
