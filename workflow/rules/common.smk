import json
import re
import sys


def _check_active_models():
    unknown = [m for m in config["active_models"] if m not in config["models"]]
    if unknown:
        raise ValueError(
            f"config: active_models names {unknown}, which are not under models: "
            f"(known: {sorted(config['models'])})"
        )


_check_active_models()

ACTIVE = list(config["active_models"])
TABLES = ["closure_tail", "pk_writing"]
FIGURES = ["closure_ccdf", "pk_rho_ccdf"]
ALL_TARGETS = [
    f"results/tables/{t}.{ext}" for t in TABLES for ext in ("csv", "md", "tex")
] + [f"figures/{f}.{ext}" for f in FIGURES for ext in ("png", "pdf")]


wildcard_constraints:
    model="|".join(re.escape(m) for m in config["models"]),
    layer=r"\d+",


def store_dir(model):
    return f"results/tensors/{model}"


def n_layers(model):
    """Known once the model's tensors are fetched (fetch is a checkpoint)."""
    manifest = checkpoints.fetch.get(model=model).output.manifest
    with open(manifest) as fh:
        return json.load(fh)["fields"]["n_layers"]


def layer_shards(job):
    def inner(wildcards):
        return [
            f"results/shards/{job}/{m}/layer{l}.parquet"
            for m in ACTIVE
            for l in range(n_layers(m))
        ]

    return inner


# Named as plain paths so that every model's fetch is scheduled at once (an input function
# that asks a checkpoint stops at the first model not yet fetched).
MANIFESTS = [f"results/tensors/{m}/manifest.json" for m in ACTIVE]


def cost(job, key):
    """mem_mb / runtime of one job from the model's shape (headgeom.jobs.costs; README 'Job costs')."""
    from headgeom.jobs.costs import resources

    def inner(wildcards, input):
        nulls = config["pk"]["nulls"]
        return resources(
            job, input.manifest, nulls["samples_per_job"], len(nulls["types"])
        )[key]

    return inner
