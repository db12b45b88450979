# Helpers of workflow/rules/activation.smk (the activation stage; headgeom/activation).
from headgeom.activation.costs import (
    forward_resources as _act_fwd_res,
    natural_return_resources as _act_nat_res,
    read_paths_resources as _act_rp_res,
)

ACT = config.get("activation", {})
# plain output paths; the lead wires these into the output registry (headgeom.reports.outputs)
ACT_TABLE = lambda t: {
    ext: f"results/tables/{t}.{ext}" for ext in ("csv", "md", "tex")
} | {"prov": f"results/tables/{t}.prov.json"}
ACT_FIGURE = lambda f, pre: {
    f"{pre}{ext}": f"figures/{f}.{ext}" for ext in ("png", "pdf")
} | {f"{pre}prov": f"figures/{f}.prov.json"}
ACT_MODELS = (
    [m for m in ACTIVE if m in (ACT.get("models") or ACTIVE)]
    if ACT.get("enabled", False)
    else []
)


def _act_win(which):
    a = config["activation"][which]
    return f"results/activations/{{model}}/{a['corpus']}/{a['n_windows']}x{a['window']}"


def _act_tokens(wc):
    return int(wc.nwin) * int(wc.win)


def _act_layer_shards(job):
    def inner(wildcards):
        return [
            f"results/shards/{job}/{m}/layer{l}.parquet"
            for m in ACT_MODELS
            for l in range(model_fields(m)["n_layers"])
        ]

    return inner
