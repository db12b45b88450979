# PK paper suite: writer->reader pairs across layers, null jobs, Tables 1-9 and figures.


rule pk_cross_layer:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_cross/{model}/layer{layer}.parquet",
    log:
        "logs/pk_cross/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=cost("pk_cross_layer", "mem_mb"),
        runtime=cost("pk_cross_layer", "runtime"),
        cpus_per_task=1,
    params:
        cross_kinds=lookup(dpath="pk/cross_kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    script:
        "../scripts/pk_suite_job.py"


rule pk_null_within:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_null_within/{model}/layer{layer}/block{block}.parquet",
    log:
        "logs/pk_null_within/{model}/layer{layer}/block{block}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=cost("pk_null_within", "mem_mb"),
        runtime=cost("pk_null_within", "runtime"),
        cpus_per_task=1,
    params:
        samples=block_samples("within"),
        types=lookup(dpath="pk/nulls/types", within=config),
        kinds=lookup(dpath="pk/nulls/within_kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    script:
        "../scripts/pk_suite_job.py"


rule pk_null_cross:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/pk_null_cross/{model}/block{block}.parquet",
    log:
        "logs/pk_null_cross/{model}/block{block}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=cost("pk_null_cross", "mem_mb"),
        runtime=cost("pk_null_cross", "runtime"),
        cpus_per_task=1,
    params:
        samples=block_samples("cross"),
        types=lookup(dpath="pk/nulls/types", within=config),
        cross_kinds=lookup(dpath="pk/cross_kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    script:
        "../scripts/pk_suite_job.py"


for _name, (_what, _families) in PK_REPORTS.items():

    rule:
        name:
            f"report_{_name}"
        input:
            **{fam: pk_family(fam) for fam in _families},
            manifests=MANIFESTS,
        output:
            **(
                TABLE_REPORT(_name, "PK paper")
                if _what == "table"
                else FIGURE_REPORT(_name, "PK paper")
            ),
        log:
            f"logs/reports/{_name}.log",
        localrule: True
        conda:
            "../../envs/headgeom.yaml"
        params:
            name=_name,
            models=ACTIVE,
            families=list(_families),
            # only the reports that read null shards get the null types: editing pk.nulls.types
            # leaves the others (Tables 1-3, 9, self-overlap, base/instruct, Figure 6) alone
            null_types=(
                lookup(dpath="pk/nulls/types", within=config)
                if any(f.startswith("pk_null") for f in _families)
                else []
            ),
            pairs=_pairs() if _name == "pk_base_instruct" else [],
        script:
            "../scripts/pk_report.py"

    ALL_TARGETS += (
        list(TABLE_OUT(_name).values())
        if _what == "table"
        else list(FIGURE_OUT(_name).values())
    )
