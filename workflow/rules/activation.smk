# Activation stage (METHODS §3; headgeom/activation): forward passes on text through transformers'
# modeling code, paper 1's natural return and the PK paper's read paths (Figures 4, 5).
#
#   activation_forward         results/activations/{model}/{corpus}/{n}x{w}/layer{L}.safetensors  one job per
#                              (model, corpus, windows): z (tokens, H, d_head) and x (tokens, d_model), float32
#   activation_natural_return  results/shards/activation_natural_return/{model}/layer{L}.parquet  per (model, layer)
#   activation_read_paths      results/shards/activation_read_paths/{model}/layer{L}.parquet      per (model, writer layer)
# Aggregates (local rules): results/tables/activation_{natural_return,read_paths}.*,
#   figures/activation_{natural_return,fig4,fig5}.*
wildcard_constraints:
    corpus="|".join(re.escape(c) for c in config.get("texts", {})) or "NO_CORPUS",
    nwin=r"\d+",
    win=r"\d+",


rule activation_forward:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
    output:
        directory("results/activations/{model}/{corpus}/{nwin}x{win}"),
    log:
        "logs/activation/forward/{model}/{corpus}/{nwin}x{win}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 2
    resources:
        mem_mb=lambda wc, input: _act_fwd_res(input.manifest, _act_tokens(wc))["mem_mb"],
        runtime=lambda wc, input: _act_fwd_res(input.manifest, _act_tokens(wc))[
            "runtime"
        ],
        cpus_per_task=2,
    params:
        entry=lambda wc: config["models"][wc.model],
        corpus_entry=lambda wc: config["texts"][wc.corpus],
        device=lookup(dpath="activation/device", within=config),
        bos=lookup(dpath="activation/bos", within=config),
        weight_rtol=lookup(dpath="activation/weight_rtol", within=config),
    script:
        "../scripts/activation_forward.py"


rule activation_natural_return:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
        acts=_act_win("paper1"),
    output:
        "results/shards/activation_natural_return/{model}/layer{layer}.parquet",
    log:
        "logs/activation/natural_return/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=lambda wc, input: _act_nat_res(
            input.manifest,
            config["activation"]["paper1"]["n_windows"]
            * config["activation"]["paper1"]["window"],
        )["mem_mb"],
        runtime=5,
        cpus_per_task=1,
    params:
        endpoint=lookup(dpath="activation/paper1/endpoint", within=config),
    script:
        "../scripts/activation_natural_return.py"


rule activation_read_paths:
    input:
        manifest="results/tensors/{model}/manifest.json",
        tensors="results/tensors/{model}/tensors.safetensors",
        acts=_act_win("read_paths"),
    output:
        "results/shards/activation_read_paths/{model}/layer{layer}.parquet",
    log:
        "logs/activation/read_paths/{model}/layer{layer}.log",
    conda:
        "../../envs/headgeom.yaml"
    threads: 1
    resources:
        mem_mb=lambda wc, input: _act_rp_res(
            input.manifest,
            config["activation"]["read_paths"]["n_windows"]
            * config["activation"]["read_paths"]["window"],
        )["mem_mb"],
        runtime=lambda wc, input: _act_rp_res(
            input.manifest,
            config["activation"]["read_paths"]["n_windows"]
            * config["activation"]["read_paths"]["window"],
        )["runtime"],
        cpus_per_task=1,
    params:
        kinds=lookup(dpath="activation/read_paths/kinds", within=config),
        eps_exact=lookup(dpath="activation/read_paths/eps_exact", within=config),
        rank_rtol=lookup(dpath="rank_rtol", within=config),
    script:
        "../scripts/activation_read_paths.py"


rule activation_natural_return_outputs:
    input:
        manifests=[f"results/tensors/{m}/manifest.json" for m in ACT_MODELS],
        shards=_act_layer_shards("activation_natural_return"),
        # closure P per head (every layer, whatever the model's scope: headgeom.jobs.scopes)
        closure=family_shards("paper1_heads", ACT_MODELS, scoped=False),
    output:
        **ACT_TABLE("activation_natural_return"),
        **ACT_FIGURE("activation_natural_return", "fig_"),
    log:
        "logs/tables/activation_natural_return.log",
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACT_MODELS,
        endpoint=lookup(dpath="activation/paper1/endpoint", within=config),
        high_quantile=lookup(dpath="activation/paper1/high_quantile", within=config),
        low_quantile=lookup(dpath="activation/paper1/low_quantile", within=config),
    script:
        "../scripts/activation_report.py"


rule activation_read_paths_outputs:
    input:
        manifests=[f"results/tensors/{m}/manifest.json" for m in ACT_MODELS],
        shards=_act_layer_shards("activation_read_paths"),
    output:
        **ACT_TABLE("activation_read_paths"),
        **ACT_FIGURE("activation_fig4", "fig4_"),
        **ACT_FIGURE("activation_fig5", "fig5_"),
    log:
        "logs/tables/activation_read_paths.log",
    localrule: True
    conda:
        "../../envs/headgeom.yaml"
    params:
        models=ACT_MODELS,
    script:
        "../scripts/activation_report.py"


if ACT_MODELS:
    ALL_TARGETS += [
        f"results/tables/activation_{t}.{ext}"
        for t in ("natural_return", "read_paths")
        for ext in ("csv", "md", "tex")
    ] + [
        f"figures/activation_{f}.{ext}"
        for f in ("natural_return", "fig4", "fig5")
        for ext in ("png", "pdf")
    ]
