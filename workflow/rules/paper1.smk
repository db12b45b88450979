# Paper 1 suite (scramble/Haar nulls, factorial DxK, capacity, siblings, trajectories).
# Rule files extend ALL_TARGETS (defined in common.smk) with their tables and figures.
#
# Per layer (one job per model x layer, Parquet shard + provenance):
#   paper1_heads     results/shards/paper1_heads/{model}/layer{L}.parquet   per head: closure, perturbation
#                    results/shards/paper1_pairs/{model}/layer{L}.parquet   split, scrambles, Haar, factorial,
#                                                                           anchors; per sibling pair: F, rho, gamma
#   paper1_capacity  results/shards/paper1_capacity/{model}/layer{L}.parquet  Cap_hat, R, E of the selected heads
# Aggregates (local rules): results/tables/paper1_*.{csv,md,tex,prov.json}, figures/paper1_*.{png,pdf,prov.json}

from headgeom.paper1_jobs import job_resources as _p1_job_resources


def _p1_res(kind, key):
    """Resources from the model's layer shape (headgeom.paper1_jobs.job_resources; README)."""

    def inner(wildcards, input):
        cap = config["paper1"]["capacity"]
        return _p1_job_resources(kind, input.manifest, cap["restarts"], cap["iters"])[key]

    return inner


def _p1_lineages():
    """paper1.lineages: name -> [checkpoint model, ..., final model]; every name must be a
    configured model and belong to at most one lineage."""
    lineages = config["paper1"].get("lineages") or {}
    owner = {}
    for name, members in lineages.items():
        unknown = [m for m in members if m not in config["models"]]
        if unknown:
            raise ValueError(
                f"config: paper1.lineages.{name} names {unknown}, which are not under models: "
                f"(known: {sorted(config['models'])})"
            )
        for m in members:
            if m in owner:
                raise ValueError(f"config: paper1.lineages: model {m!r} is in both {owner[m]!r} and {name!r}")
            owner[m] = name
    return lineages, owner


P1_LINEAGES, P1_LINEAGE_OF = _p1_lineages()
# Table 3 covers the configured lineages; without any, each active model is a one-checkpoint lineage.
P1_TRAJ_MODELS = [m for members in P1_LINEAGES.values() for m in members] or ACTIVE


def p1_final(model):
    """The checkpoint whose closure fixes a model's capacity groups (its lineage's last; else itself)."""
    name = P1_LINEAGE_OF.get(model)
    return P1_LINEAGES[name][-1] if name else model


def p1_shards(kind, models):
    def inner(wildcards):
        return [f"results/shards/{kind}/{m}/layer{l}.parquet" for m in models for l in range(n_layers(m))]

    return inner


P1_TABLES = {
    # name: (shard kinds read, config params used)
    "paper1_table2": (("heads",), ("strong_threshold", "sweep")),
    "paper1_table3": (("capacity",), ("strong_threshold", "bootstrap", "lineages")),
    "paper1_table4": (("pairs",), ("strong_threshold",)),
    "paper1_sweep": (("heads",), ("sweep",)),
    "paper1_scramble": (("heads",), ("strong_threshold",)),
    "paper1_layers": (("heads",), ("strong_threshold",)),
    "paper1_factorial": (("heads",), ()),
    "paper1_capacity": (("capacity",), ("strong_threshold",)),
    "paper1_latent": (("heads",), ("strong_threshold",)),
    "paper1_anchor": (("heads", "pairs"), ("strong_threshold",)),
}
P1_FIGURES = {
    "paper1_closure_ccdf": (("heads",), ("strong_threshold", "sweep")),
    "paper1_scramble": (("heads",), ("strong_threshold",)),
    "paper1_capacity": (("capacity",), ("strong_threshold",)),
    "paper1_siblings": (("pairs",), ("strong_threshold",)),
}
P1_PARAMS = {
    "strong_threshold": lookup(dpath="tables/strong_threshold", within=config),
    "sweep": lookup(dpath="paper1/sweep", within=config),
    "bootstrap": lookup(dpath="paper1/bootstrap", within=config),
    "lineages": lookup(dpath="paper1/lineages", within=config),
}
P1_INPUTS = {
    "heads": p1_shards("paper1_heads", ACTIVE),
    "pairs": p1_shards("paper1_pairs", ACTIVE),
}

ALL_TARGETS += [f"results/tables/{t}.{ext}" for t in P1_TABLES for ext in ("csv", "md", "tex")] + [
    f"figures/{f}.{ext}" for f in P1_FIGURES for ext in ("png", "pdf")
]


rule paper1_heads:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        heads="results/shards/paper1_heads/{model}/layer{layer}.parquet",
        pairs="results/shards/paper1_pairs/{model}/layer{layer}.parquet",
    params:
        identity_rtol=lookup(dpath="closure/identity_rtol", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
        scramble_draws=lookup(dpath="paper1/scramble_draws", within=config),
        haar_draws=lookup(dpath="paper1/haar_draws", within=config),
        split_rtol=lookup(dpath="paper1/split_rtol", within=config),
        sv_rtol=lookup(dpath="paper1/sv_rtol", within=config),
    log:
        "logs/paper1/heads/{model}/layer{layer}.log",
    threads: 1
    # Qwen3-235B layer shape (d_model 4096, d_head 128, 64 heads, 4 KV groups): ~10 s, 1.4 GB measured;
    # requested: 1.7 GB, 6 min (scaled by the model's layer shape)
    resources:
        mem_mb=_p1_res("heads", "mem_mb"),
        runtime=_p1_res("heads", "runtime"),
        cpus_per_task=1,
    script:
        "../scripts/paper1_heads.py"


rule paper1_capacity:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
        final_manifest=lambda wc: f"results/tensors/{p1_final(wc.model)}/manifest.json",
        final_tensors=lambda wc: f"results/tensors/{p1_final(wc.model)}/tensors.safetensors",
    output:
        "results/shards/paper1_capacity/{model}/layer{layer}.parquet",
    params:
        final_model=lambda wc: p1_final(wc.model),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
        scramble_draws=lookup(dpath="paper1/scramble_draws", within=config),
        sv_rtol=lookup(dpath="paper1/sv_rtol", within=config),
        restarts=lookup(dpath="paper1/capacity/restarts", within=config),
        iters=lookup(dpath="paper1/capacity/iters", within=config),
        sample_per_layer=lookup(dpath="paper1/capacity/sample_per_layer", within=config),
    log:
        "logs/paper1/capacity/{model}/layer{layer}.log",
    threads: 1
    # Qwen3-235B layer shape: 1.4 GB; 0.48 s per selected head by default, 5.5 s with config/paper.yaml;
    # requested: 1.7 GB and a runtime for every head selected (7 min by default, 27 min with paper.yaml)
    resources:
        mem_mb=_p1_res("capacity", "mem_mb"),
        runtime=_p1_res("capacity", "runtime"),
        cpus_per_task=1,
    script:
        "../scripts/paper1_capacity.py"


for _name, (_kinds, _pkeys) in P1_TABLES.items():

    rule:
        name:
            f"table_{_name}"
        input:
            manifests=MANIFESTS,
            traj_manifests=[f"results/tensors/{m}/manifest.json" for m in P1_TRAJ_MODELS] if "capacity" in _kinds else [],
            **{k: P1_INPUTS[k] for k in _kinds if k != "capacity"},
            **({"capacity": p1_shards("paper1_capacity", P1_TRAJ_MODELS if _name == "paper1_table3" else ACTIVE)}
               if "capacity" in _kinds else {}),
        output:
            **TABLE_OUT(_name),
        params:
            models=ACTIVE,
            **{k: P1_PARAMS[k] for k in _pkeys},
        log:
            f"logs/tables/{_name}.log",
        localrule: True
        script:
            "../scripts/paper1_report.py"


for _name, (_kinds, _pkeys) in P1_FIGURES.items():

    rule:
        name:
            f"figure_{_name}"
        input:
            manifests=MANIFESTS,
            **{k: P1_INPUTS[k] for k in _kinds if k != "capacity"},
            **({"capacity": p1_shards("paper1_capacity", ACTIVE)} if "capacity" in _kinds else {}),
        output:
            **FIGURE_OUT(_name),
        params:
            models=ACTIVE,
            **{k: P1_PARAMS[k] for k in _pkeys},
        log:
            f"logs/figures/{_name}.log",
        localrule: True
        script:
            "../scripts/paper1_report.py"
