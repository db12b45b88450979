# Helpers of workflow/rules/activation.smk (the activation stage; headgeom/activation). The
# per-layer analysis jobs and the tables/figures are in the registries
# (headgeom.jobs.families, headgeom.outputs); only the forward pass is a rule of its own.
from headgeom.jobs.activation_costs import forward_resources as _act_fwd_res
from headgeom.jobs.activation_costs import gpus as _act_gpus

from headgeom.jobs.families import activation_models

# the models the activation stage runs for (its outputs' shard_models "activation")
ACT_MODELS = activation_models(config)
OUTPUT_MODELS["activation"] = ACT_MODELS


def _act_tokens(wc):
    return int(wc.nwin) * int(wc.win)


def _act_corpus_file(wildcards):
    """A local corpus file is an input of the forward job: editing the text reruns it. A missing
    one is left to the job, whose error names the corpus (headgeom.activation.CorpusError).
    """
    entry = config["texts"][wildcards.corpus]
    if entry.get("source") == "local" and Path(entry["path"]).is_file():
        return [entry["path"]]
    return []
