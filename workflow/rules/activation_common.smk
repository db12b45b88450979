# Helpers of workflow/rules/activation.smk (the activation stage; headgeom/jobs/activation.py). The
# per-layer analysis jobs and the tables/figures are in the registries
# (headgeom.schedule.families, headgeom.outputs); only the forward pass is a rule of its own.
from headgeom.schedule.activation_costs import gpus as _act_gpus
from headgeom.schedule.families import forward_source

# the models the activation stage runs for (its outputs' shard_models "activation")
ACT_MODELS = OUTPUT_MODELS["activation"]
# the cores a forward job holds (activation_forward, sensitivity_forward): threads and cpus_per_task
ACT_THREADS = lookup(dpath="activation/threads", within=config)


def _act_fwd_res(wc, input, key):
    """The forward step's cost model (headgeom.schedule.families.STEPS)."""
    return FORWARD.cost(input.manifest, config, wc)[key]


def _act_source(wc):
    """The longer forward pass whose first windows this one's are (under the alternative's root for
    sensitivity_forward), or none: the job then runs the model (headgeom.schedule.families.forward_source).
    """
    n = forward_source(config, wc.corpus, wc.nwin, wc.win)
    if n is None:
        return []
    if "alt" in wc.keys():
        return [layout.sensitivity_activations(wc.alt, wc.model, wc.corpus, n, wc.win)]
    return [layout.activations(wc.model, wc.corpus, n, wc.win)]


def _act_fwd_gpus(wc):
    """A GPU for a forward job that runs the model on CUDA; none for one that takes another's windows."""
    if forward_source(config, wc.corpus, wc.nwin, wc.win) is not None:
        return 0
    return _act_gpus(config.get("activation", {}).get("device", "cpu"))


def _act_corpus_file(wildcards):
    """A local corpus file is an input of the forward job: editing the text reruns it. A missing
    one is left to the job, whose error names the corpus (headgeom.core.errors.CorpusError).
    """
    entry = config["texts"][wildcards.corpus]
    if entry.get("source") == "local" and Path(entry["path"]).is_file():
        return [entry["path"]]
    return []
