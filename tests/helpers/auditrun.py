"""A results/ tree for audit tests, built by the job functions (no Snakemake, a few seconds): a
tiny store with no strongly closed head, two closure shards and p1_table2_strong_tail, whose
strong-head columns are NaN."""

from __future__ import annotations

import os
from pathlib import Path

from headgeom.io.fetch import fetch_model
from headgeom.jobs.paper1 import heads_job
from headgeom.outputs import build_output
from synth import write_llama

TABLE = "p1_table2_strong_tail"
SHARDS = [f"results/shards/paper1_heads/tiny/layer{layer}.parquet" for layer in (0, 1)]


def outs(d: Path, name: str = "t") -> dict:
    return {k: str(d / f"{name}.{k}") for k in ("csv", "md", "tex")} | {"prov": str(d / f"{name}.prov.json")}


def audit_results(w: Path) -> Path:
    """Build the tree under ``w`` and return ``w``."""
    write_llama(w / "ck", n_layers=2, closed=())
    fetch_model("tiny", {"source": "local", "path": str(w / "ck")}, w / "results/tensors/tiny", log=lambda s: None)
    cwd = os.getcwd()
    os.chdir(w)
    params = {"identity_rtol": 1e-10, "rank_rtol": 1e-6, "scramble_draws": 2, "haar_draws": 1,
              "split_rtol": 1e-8, "sv_rtol": 1e-12}
    try:
        for layer, p in enumerate(SHARDS):
            heads_job("results/tensors/tiny", layer, p, f"results/shards/paper1_pairs/tiny/layer{layer}.parquet",
                      params, log=lambda s: None)
        build_output("table", TABLE, {"paper1_heads": SHARDS}, ["results/tensors/tiny/manifest.json"], ["tiny"],
                     outs(Path("results/tables"), TABLE), {"strong_threshold": 0.9, "sweep": [0.85, 0.9, 0.95]})
    finally:
        os.chdir(cwd)
    return w
