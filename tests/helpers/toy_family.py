"""A shard family added through the registry alone (README, "Recipes"): the per-head Frobenius
norm of W_O, one shard per layer. Registered when this module is imported, i.e. when
HEADGEOM_PLUGINS names it (tests/unit/adapters/test_plugin_family.py, tests/workflow/test_plugin_family_workflow.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headgeom.jobs.common import shard_provenance, with_keys
from headgeom.schedule.families import Job, register


def run(inputs, outputs, wildcards, params, log):
    from headgeom.io.shards import write_shard
    from headgeom.io.store import TensorStore

    store = TensorStore(Path(inputs["manifest"]).parent)
    layer = int(wildcards["layer"])
    W_O = store.layer_factors(layer).W_O
    cols = {"head": np.arange(len(W_O)), "wo_fro": np.linalg.norm(W_O.reshape(len(W_O), -1), axis=1)}
    write_shard(outputs["shard"], with_keys(cols, store.manifest["model"], layer),
                shard_provenance("toy_wo_norm", store, layer, params))
    log(f"[toy_wo_norm L{layer}] {len(W_O)} heads")


def cost(job, manifest, config, wildcards=None):
    return {"mem_mb": 600, "runtime": 5}


JOB = register(Job(
    "toy_wo_norm", run,
    outputs={"shard": ("toy_wo_norm", "layer")},
    params={"rank_rtol": "rank_rtol"},
    cost_model=cost,
    seed_scheme="none (deterministic)",
    log="logs/toy_wo_norm/{model}/layer{layer}.log",
    stage="paper1",
))
