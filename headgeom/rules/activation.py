"""The forward passes (workflow/rules/activation.smk: activation_forward; and
workflow/rules/sensitivity.smk: sensitivity_forward, the same pass under an alternative's window
cutting): cost, GPUs, the longer pass whose first windows a job takes, the corpus file.

The per-layer analysis jobs and the tables/figures of the activation stage are in the registries
(headgeom.schedule.families, headgeom.outputs); only the forward pass is a rule of its own."""

from __future__ import annotations

from pathlib import Path

from snakemake.ioutils import lookup

from headgeom import layout
from headgeom.schedule.activation_costs import gpus
from headgeom.schedule.families import FORWARD, forward_source


def forward_threads(config: dict) -> int:
    """The cores a forward job holds (activation_forward, sensitivity_forward): threads and cpus_per_task."""
    return lookup(dpath="activation/threads", within=config)


def forward_cost(config: dict, key: str):
    """The forward step's cost model (headgeom.schedule.families.STEPS)."""
    return lambda wc, input: FORWARD.cost(input.manifest, config, wc)[key]


def forward_gpus(config: dict):
    """A GPU for a forward job that runs the model on CUDA; none for one that takes another's windows."""

    def inner(wc):
        if forward_source(config, wc.corpus, wc.nwin, wc.win) is not None:
            return 0
        return gpus(config.get("activation", {}).get("device", "cpu"))

    return inner


def forward_resources(config: dict) -> dict:
    """A forward job's resources: its cost model, its cores, a GPU where it runs the model on CUDA
    (SLURM profile: sbatch --gpus=1 when activation.device is cuda[:N], for these rules only)."""
    return {
        "mem_mb": forward_cost(config, "mem_mb"),
        "runtime": forward_cost(config, "runtime"),
        "cpus_per_task": forward_threads(config),
        "gpu": forward_gpus(config),
    }


def longer_pass(config: dict):
    """Input function: the longer forward pass whose first windows this one's are (under the
    alternative's root for sensitivity_forward), or none: the job then runs the model
    (headgeom.schedule.families.forward_source)."""

    def inner(wc):
        n = forward_source(config, wc.corpus, wc.nwin, wc.win)
        if n is None:
            return []
        if "alt" in wc.keys():
            return [layout.sensitivity_activations(wc.alt, wc.model, wc.corpus, n, wc.win)]
        return [layout.activations(wc.model, wc.corpus, n, wc.win)]

    return inner


def corpus_file(config: dict):
    """Input function: a local corpus file is an input of the forward job, so editing the text
    reruns it. A missing one is left to the job, whose error names the corpus
    (headgeom.core.errors.CorpusError)."""

    def inner(wildcards):
        entry = config["texts"][wildcards.corpus]
        if entry.get("source") == "local" and Path(entry["path"]).is_file():
            return [entry["path"]]
        return []

    return inner


def corpus_entry(config: dict):
    """Param: the corpus's config entry."""
    return lambda wc: config["texts"][wc.corpus]
