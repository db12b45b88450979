# Helpers and constants of the paper 1 rules (kept apart from the rules: snakemake --lint).
from headgeom.jobs.paper1 import job_resources as _p1_job_resources


def _p1_res(kind, key):
    """Resources from the model's layer shape (headgeom.jobs.paper1.job_resources; README)."""

    def inner(wildcards, input):
        cap = config["paper1"]["capacity"]
        return _p1_job_resources(kind, input.manifest, cap["restarts"], cap["iters"])[
            key
        ]

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
                raise ValueError(
                    f"config: paper1.lineages: model {m!r} is in both {owner[m]!r} and {name!r}"
                )
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
        return [
            f"results/shards/{kind}/{m}/layer{l}.parquet"
            for m in models
            for l in range(n_layers(m))
        ]

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

ALL_TARGETS += [
    f"results/tables/{t}.{ext}" for t in P1_TABLES for ext in ("csv", "md", "tex")
] + [f"figures/{f}.{ext}" for f in P1_FIGURES for ext in ("png", "pdf")]
