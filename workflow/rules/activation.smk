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
from headgeom import layout
from headgeom.schedule.families import FORWARD
from headgeom.rules.activation import (
    corpus_entry,
    corpus_file,
    forward_resources,
    forward_threads,
    longer_pass,
)
from headgeom.rules.fetch import checkpoint_entry


rule activation_forward:
    input:
        manifest=layout.MANIFEST,
        tensors=layout.TENSORS,
        corpus=corpus_file(config),
        source=longer_pass(config),
    output:
        directory(FORWARD.outputs["acts"]),
    log:
        FORWARD.log,
    conda:
        "../../envs/headgeom.yaml"
    threads: forward_threads(config)
    resources:
        # one GPU (SLURM profile: sbatch --gpus=1) when activation.device is cuda[:N], for this rule only
        **forward_resources(config),
    params:
        # only the keys that locate the checkpoint (as fetch): editing a model's notes reruns nothing
        entry=checkpoint_entry(config),
        corpus_entry=corpus_entry(config),
        device=lookup(dpath="activation/device", within=config),
        bos=lookup(dpath="activation/bos", within=config),
        weight_rtol=lookup(dpath="activation/weight_rtol", within=config),
    script:
        "../scripts/activation_forward.py"
