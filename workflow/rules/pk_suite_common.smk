# Helpers and constants of the PK suite rules (kept apart from the rules: snakemake --lint).
from headgeom.methods.nulls import NULL_MODELS


def _check_null_types():
    """Every null type named globally or in a model's scope is a null model."""
    for where, m in [("pk.nulls.types", None)] + [
        (f"the scope of {m!r}: pk.nulls.types", m) for m in config["models"]
    ]:
        types = (
            scopes.model_config(config, m)["pk"]["nulls"]["types"]
            if m
            else config["pk"]["nulls"]["types"]
        )
        unknown = [t for t in types if t not in NULL_MODELS]
        if unknown:
            raise ValueError(
                f"config: {where} names {unknown}, which are not null models "
                f"(known: {sorted(NULL_MODELS)}; headgeom.methods.nulls.NULL_MODELS)"
            )


_check_null_types()


def block_samples(which):
    """A block's sample indices are its params (from the model's scope): growing the sample
    count adds blocks and leaves the finished ones untouched."""

    def inner(wildcards):
        return scopes.samples(
            which, config, wildcards.model, int(wildcards.block), _layer(wildcards)
        )

    return inner


def _pairs():
    """Declared base/instruct pairs (models[x].pair = y) with both sides active and running
    the PK stage (headgeom.jobs.scopes)."""
    pk_models = scopes.stage_models(config, ACTIVE, "pk")
    return sorted(
        {
            tuple(sorted((m, config["models"][m]["pair"])))
            for m in pk_models
            if config["models"][m].get("pair") in pk_models
        }
    )
