rule pk_layer:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        pairs="results/shards/pk/{model}/layer{layer}.parquet",
        self_overlap="results/shards/pk_self/{model}/layer{layer}.parquet",
    log:
        "logs/pk/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=cost("pk_layer", "mem_mb"),
        runtime=cost("pk_layer", "runtime"),
        cpus_per_task=1,
    params:
        kinds=lookup(dpath="pk/kinds", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
        self_permutations=lookup(dpath="pk/self_permutations", within=config),
    script:
        "../scripts/pk_layer.py"
