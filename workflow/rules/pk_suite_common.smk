# Helpers and constants of the PK suite rules (kept apart from the rules: snakemake --lint).
from headgeom.methods.nulls import NULL_MODELS, n_blocks, sample_range


def _check_null_types():
    unknown = [t for t in config["pk"]["nulls"]["types"] if t not in NULL_MODELS]
    if unknown:
        raise ValueError(
            f"config: pk.nulls.types names {unknown}, which are not null models "
            f"(known: {sorted(NULL_MODELS)}; headgeom.methods.nulls.NULL_MODELS)"
        )


_check_null_types()


def null_blocks(which):
    n = config["pk"]["nulls"][f"{which}_samples"]
    return range(n_blocks(n, config["pk"]["nulls"]["samples_per_job"]))


NULL_BLOCKS = {w: null_blocks(w) for w in ("within", "cross")}


def block_samples(which):
    """A block's sample indices are its params: growing the sample count adds blocks and
    leaves the finished ones untouched."""

    def inner(wildcards):
        nulls = config["pk"]["nulls"]
        return list(
            sample_range(
                nulls[f"{which}_samples"],
                int(wildcards.block),
                nulls["samples_per_job"],
            )
        )

    return inner


def _pairs():
    """Declared base/instruct pairs (models[x].pair = y) with both sides active."""
    return sorted(
        {
            tuple(sorted((m, config["models"][m]["pair"])))
            for m in ACTIVE
            if config["models"][m].get("pair") in ACTIVE
        }
    )
