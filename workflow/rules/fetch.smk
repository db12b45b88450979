checkpoint fetch:
    output:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    params:
        entry=lookup(dpath="models/{model}", within=config),
    log:
        "logs/fetch/{model}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
        cpus_per_task=1,
    script:
        "../scripts/fetch.py"
