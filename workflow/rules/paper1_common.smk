# Helpers and constants of the paper 1 rules (kept apart from the rules: snakemake --lint).


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


# whose shards an output reads (headgeom.outputs.Output.shard_models)
OUTPUT_MODELS = {"active": ACTIVE, "lineages": P1_TRAJ_MODELS}
