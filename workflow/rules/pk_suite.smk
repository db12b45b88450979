# PK paper suite: writer->reader pairs across layers, null jobs, Tables 1-9 and figures.
from headgeom.nulls import n_blocks, sample_range


def null_blocks(which):
    n = config["pk"]["nulls"][f"{which}_samples"]
    return range(n_blocks(n, config["pk"]["nulls"]["samples_per_job"]))


def block_samples(which):
    """A block's sample indices are its params: growing the sample count adds blocks and
    leaves the finished ones untouched."""

    def inner(wildcards):
        nulls = config["pk"]["nulls"]
        return list(sample_range(nulls[f"{which}_samples"], int(wildcards.block), nulls["samples_per_job"]))

    return inner


def pk_family(family):
    """Shard paths of one family for every active model (layer counts from the manifests)."""

    def inner(wildcards):
        out = []
        for m in ACTIVE:
            L = n_layers(m)
            if family in ("pk", "pk_self"):
                out += [f"results/shards/{family}/{m}/layer{l}.parquet" for l in range(L)]
            elif family == "pk_cross":
                out += [f"results/shards/pk_cross/{m}/layer{l}.parquet" for l in range(L - 1)]
            elif family == "pk_null_within":
                out += [
                    f"results/shards/pk_null_within/{m}/layer{l}/block{b}.parquet"
                    for l in range(L)
                    for b in null_blocks("within")
                ]
            elif family == "pk_null_cross":
                out += [f"results/shards/pk_null_cross/{m}/block{b}.parquet" for b in null_blocks("cross")]
        return out

    return inner


rule pk_cross_layer:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_cross/{model}/layer{layer}.parquet",
    params:
        cross_kinds=lookup(dpath="pk/cross_kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    log:
        "logs/pk_cross/{model}/layer{layer}.log",
    threads: 1
    resources:
        mem_mb=cost("pk_cross_layer", "mem_mb"),
        runtime=cost("pk_cross_layer", "runtime"),
        cpus_per_task=1,
    script:
        "../scripts/pk_suite_job.py"


rule pk_null_within:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_null_within/{model}/layer{layer}/block{block}.parquet",
    params:
        samples=block_samples("within"),
        types=lookup(dpath="pk/nulls/types", within=config),
        kinds=lookup(dpath="pk/kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    log:
        "logs/pk_null_within/{model}/layer{layer}/block{block}.log",
    threads: 1
    resources:
        mem_mb=cost("pk_null_within", "mem_mb"),
        runtime=cost("pk_null_within", "runtime"),
        cpus_per_task=1,
    script:
        "../scripts/pk_suite_job.py"


rule pk_null_cross:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_null_cross/{model}/block{block}.parquet",
    params:
        samples=block_samples("cross"),
        types=lookup(dpath="pk/nulls/types", within=config),
        cross_kinds=lookup(dpath="pk/cross_kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    log:
        "logs/pk_null_cross/{model}/block{block}.log",
    threads: 1
    resources:
        mem_mb=cost("pk_null_cross", "mem_mb"),
        runtime=cost("pk_null_cross", "runtime"),
        cpus_per_task=1,
    script:
        "../scripts/pk_suite_job.py"


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
    **{n: ("table", fams) for n, fams in __import__("headgeom.report_pk", fromlist=["TABLES"]).TABLES.items()},
    **{n: ("figure", fams) for n, fams in __import__("headgeom.report_pk", fromlist=["FIGURES"]).FIGURES.items()},
}

for _name, (_what, _families) in PK_REPORTS.items():

    rule:
        name:
            f"report_{_name}"
        input:
            manifests=MANIFESTS,
            **{fam: pk_family(fam) for fam in _families},
        output:
            **(TABLE_REPORT(_name, "PK paper") if _what == "table" else FIGURE_REPORT(_name, "PK paper")),
        params:
            name=_name,
            models=ACTIVE,
            families=list(_families),
            # only the reports that read null shards get the null types: editing pk.nulls.types
            # leaves the others (Tables 1-3, 9, self-overlap, base/instruct, Figure 6) alone
            null_types=lookup(dpath="pk/nulls/types", within=config)
            if any(f.startswith("pk_null") for f in _families)
            else [],
            pairs=_pairs() if _name == "pk_base_instruct" else [],
        log:
            f"logs/reports/{_name}.log",
        localrule: True
        script:
            "../scripts/pk_report.py"

    ALL_TARGETS += (
        list(TABLE_OUT(_name).values())
        if _what == "table"
        else list(FIGURE_OUT(_name).values())
    )
