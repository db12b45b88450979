rule closure_layer:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        "results/shards/closure/{model}/layer{layer}.parquet",
    log:
        "logs/closure/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=cost("closure_layer", "mem_mb"),
        runtime=cost("closure_layer", "runtime"),
        cpus_per_task=1,
    params:
        identity_rtol=lookup(dpath="closure/identity_rtol", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    script:
        "../scripts/closure_layer.py"
