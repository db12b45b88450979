# Helpers and constants of the PK suite rules (kept apart from the rules: snakemake --lint).


def block_samples(which):
    """A block's sample indices are its params (from the model's design): growing the sample
    count adds blocks and leaves the finished ones untouched."""

    def inner(wildcards):
        return designs.samples(
            which, config, wildcards.model, int(wildcards.block), _layer(wildcards)
        )

    return inner


def _pairs():
    """Declared base/instruct pairs (models[x].pair = y) with both sides active and running
    the PK stage (headgeom.schedule.designs)."""
    pk_models = designs.stage_models(config, ACTIVE, "pk")
    return sorted(
        {
            tuple(sorted((m, config["models"][m]["pair"])))
            for m in pk_models
            if config["models"][m].get("pair") in pk_models
        }
    )
