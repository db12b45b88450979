# Helpers and constants of the PK suite rules (kept apart from the rules: snakemake --lint).
from headgeom.methods.nulls import n_blocks, sample_range


def null_blocks(which):
    n = config["pk"]["nulls"][f"{which}_samples"]
    return range(n_blocks(n, config["pk"]["nulls"]["samples_per_job"]))


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


def pk_family(family):
    """Shard paths of one family for every active model (layer counts from the manifests)."""

    def inner(wildcards):
        out = []
        for m in ACTIVE:
            L = n_layers(m)
            if family in ("pk", "pk_self"):
                out += [
                    f"results/shards/{family}/{m}/layer{l}.parquet" for l in range(L)
                ]
            elif family == "pk_cross":
                out += [
                    f"results/shards/pk_cross/{m}/layer{l}.parquet"
                    for l in range(L - 1)
                ]
            elif family == "pk_null_within":
                out += [
                    f"results/shards/pk_null_within/{m}/layer{l}/block{b}.parquet"
                    for l in range(L)
                    for b in null_blocks("within")
                ]
            elif family == "pk_null_cross":
                out += [
                    f"results/shards/pk_null_cross/{m}/block{b}.parquet"
                    for b in null_blocks("cross")
                ]
        return out

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


PK_REPORTS = {
    **{
        n: ("table", fams)
        for n, fams in __import__(
            "headgeom.reports.pk", fromlist=["TABLES"]
        ).TABLES.items()
    },
    **{
        n: ("figure", fams)
        for n, fams in __import__(
            "headgeom.reports.pk", fromlist=["FIGURES"]
        ).FIGURES.items()
    },
}
