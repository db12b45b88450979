# Activation stage (docs/methods.md §3; headgeom/jobs/activation.py, headgeom/io/forward.py): forward passes on text through transformers'
# modeling code, paper 1's natural return and the PK paper's read paths (Figures 4, 5).
#
#   activation_forward   results/activations/{model}/{corpus}/{n}x{w}/layer{L}.safetensors: one job per
#                        (model, corpus, windows): z (tokens, H, d_head) and x (tokens, d_model), float32;
#                        where a longer pass of the same corpus and window length is run too, the job
#                        takes its first n windows (input `source`) instead of loading the model again
# The per-layer analysis jobs (activation_natural_return, activation_read_paths) are shard families
# of headgeom.schedule.families (rules from workflow/rules/jobs.smk); their tables and figures are entries
# of headgeom.outputs (rules from workflow/rules/outputs.smk).
#
# Why the forward pass stays a rule of its own: it writes a directory of per-layer safetensors
# activations, not a results/shards Parquet family; its wildcards are the corpus and the window shape,
# not a layer; it reads the model's config entry (transformers loads the checkpoint itself, not the
# tensor store) and the corpus entry; it is the one rule that may ask for a GPU; and `headgeom audit`
# cannot recompute it from the tensor store. The registry jobs read its directory as input `acts`.
wildcard_constraints:
    corpus="|".join(re.escape(c) for c in config.get("texts", {})) or "NO_CORPUS",
    nwin=r"\d+",
    win=r"\d+",


rule activation_forward:
    input:
        manifest=layout.MANIFEST,
        tensors=layout.TENSORS,
        corpus=_act_corpus_file,
        source=_act_source,
    output:
        directory(FORWARD.outputs["acts"]),
    log:
        FORWARD.log,
    conda:
        "../../envs/headgeom.yaml"
    threads: ACT_THREADS
    resources:
        mem_mb=lambda wc, input: _act_fwd_res(wc, input, "mem_mb"),
        runtime=lambda wc, input: _act_fwd_res(wc, input, "runtime"),
        cpus_per_task=ACT_THREADS,
        # one GPU (SLURM profile: sbatch --gpus=1) when activation.device is cuda[:N], for this rule only
        gpu=_act_fwd_gpus,
    params:
        # only the keys that locate the checkpoint (as fetch): editing a model's notes reruns nothing
        entry=lambda wc: {
            k: v for k, v in config["models"][wc.model].items() if k in FETCH_KEYS
        },
        corpus_entry=lambda wc: config["texts"][wc.corpus],
        device=lookup(dpath="activation/device", within=config),
        bos=lookup(dpath="activation/bos", within=config),
        weight_rtol=lookup(dpath="activation/weight_rtol", within=config),
    script:
        "../scripts/activation_forward.py"
