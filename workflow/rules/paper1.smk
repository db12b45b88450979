# Paper 1 suite (scramble/Haar nulls, factorial DxK, capacity, siblings, trajectories).
# Rule files extend ALL_TARGETS (defined in common.smk) with their tables and figures.
#
# Per layer (one job per model x layer, Parquet shard + provenance):
#   paper1_heads     results/shards/paper1_heads/{model}/layer{L}.parquet   per head: closure, perturbation
#                    results/shards/paper1_pairs/{model}/layer{L}.parquet   split, scrambles, Haar, factorial,
#                                                                           anchors; per sibling pair: F, rho, gamma
#   paper1_capacity  results/shards/paper1_capacity/{model}/layer{L}.parquet  Cap_hat, R, E of the selected heads
# Aggregates (local rules): results/tables/paper1_*.{csv,md,tex,prov.json}, figures/paper1_*.{png,pdf,prov.json}


rule paper1_heads:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        heads="results/shards/paper1_heads/{model}/layer{layer}.parquet",
        pairs="results/shards/paper1_pairs/{model}/layer{layer}.parquet",
    log:
        "logs/paper1/heads/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    # Qwen3-235B layer shape (d_model 4096, d_head 128, 64 heads, 4 KV groups): ~10 s, 1.4 GB measured;
    # requested: 1.7 GB, 6 min (scaled by the model's layer shape)
    resources:
        mem_mb=_p1_res("heads", "mem_mb"),
        runtime=_p1_res("heads", "runtime"),
        cpus_per_task=1,
    params:
        identity_rtol=lookup(dpath="closure/identity_rtol", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
        scramble_draws=lookup(dpath="paper1/scramble_draws", within=config),
        haar_draws=lookup(dpath="paper1/haar_draws", within=config),
        split_rtol=lookup(dpath="paper1/split_rtol", within=config),
        sv_rtol=lookup(dpath="paper1/sv_rtol", within=config),
    script:
        "../scripts/paper1_heads.py"


rule paper1_capacity:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
        final_manifest=lambda wc: f"results/tensors/{p1_final(wc.model)}/manifest.json",
        final_tensors=lambda wc: f"results/tensors/{p1_final(wc.model)}/tensors.safetensors",
    output:
        "results/shards/paper1_capacity/{model}/layer{layer}.parquet",
    log:
        "logs/paper1/capacity/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    # Qwen3-235B layer shape: 1.4 GB; 0.48 s per selected head by default, 5.5 s with config/paper.yaml;
    # requested: 1.7 GB and a runtime for every head selected (7 min by default, 27 min with paper.yaml)
    resources:
        mem_mb=_p1_res("capacity", "mem_mb"),
        runtime=_p1_res("capacity", "runtime"),
        cpus_per_task=1,
    params:
        final_model=lambda wc: p1_final(wc.model),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
        strong_threshold=lookup(dpath="tables/strong_threshold", within=config),
        scramble_draws=lookup(dpath="paper1/scramble_draws", within=config),
        sv_rtol=lookup(dpath="paper1/sv_rtol", within=config),
        restarts=lookup(dpath="paper1/capacity/restarts", within=config),
        iters=lookup(dpath="paper1/capacity/iters", within=config),
        sample_per_layer=lookup(dpath="paper1/capacity/sample_per_layer", within=config),
    script:
        "../scripts/paper1_capacity.py"


for _name, (_kinds, _pkeys) in P1_TABLES.items():

    rule:
        name:
            f"table_{_name}"
        input:
            **{k: P1_INPUTS[k] for k in _kinds if k != "capacity"},
            **(
                {
                    "capacity": p1_shards(
                        "paper1_capacity",
                        P1_TRAJ_MODELS if _name == "paper1_table3" else ACTIVE,
                    )
                }
                if "capacity" in _kinds
                else {}
            ),
            manifests=MANIFESTS,
            traj_manifests=(
                [f"results/tensors/{m}/manifest.json" for m in P1_TRAJ_MODELS]
                if "capacity" in _kinds
                else []
            ),
        output:
            **TABLE_REPORT(_name, "Paper 1"),
        log:
            f"logs/tables/{_name}.log",
        localrule: True
        conda:
            "../../envs/headgeom.yaml"
        params:
            **{k: P1_PARAMS[k] for k in _pkeys},
            models=ACTIVE,
        script:
            "../scripts/paper1_report.py"


for _name, (_kinds, _pkeys) in P1_FIGURES.items():

    rule:
        name:
            f"figure_{_name}"
        input:
            **{k: P1_INPUTS[k] for k in _kinds if k != "capacity"},
            **(
                {"capacity": p1_shards("paper1_capacity", ACTIVE)}
                if "capacity" in _kinds
                else {}
            ),
            manifests=MANIFESTS,
        output:
            **FIGURE_REPORT(_name, "Paper 1"),
        log:
            f"logs/figures/{_name}.log",
        localrule: True
        conda:
            "../../envs/headgeom.yaml"
        params:
            **{k: P1_PARAMS[k] for k in _pkeys},
            models=ACTIVE,
        script:
            "../scripts/paper1_report.py"
