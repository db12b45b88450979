"""bench/fullwidth.py's config: the requests it checks are the ones for the cores its jobs run on."""

from __future__ import annotations

import fullwidth

from headgeom.core.config import ROOT, load_config
from headgeom.schedule import designs
from headgeom.schedule.families import null_cross_threads

QWEN25_7B = {"d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4, "n_layers": 28}


def test_fullwidth_lays_the_cross_layer_nulls_out_on_one_core(tmp_path):
    """The bench runs each job on one core (--cores 1), so its config holds the cross-layer null jobs to one
    core: their requests (the fan-out's parts and runtime) are the one-core ones the run is measured against.
    Without it config/paper.yaml's 16 cores a job lay the 7B shape out as 16-core parts at the bench's
    10-minute ceiling, requested for 16 cores' wall-clock."""
    bench_cfg = fullwidth._config(tmp_path, tmp_path / "ckpt", 10.0)
    config = designs.model_config(load_config([ROOT / "config/paper.yaml", bench_cfg]), fullwidth.MODEL)
    assert null_cross_threads(config, QWEN25_7B) == 1
    paper_cores = {**config, "pk": {**config["pk"], "nulls": {**config["pk"]["nulls"], "cross_threads": 16}}}
    assert null_cross_threads(paper_cores, QWEN25_7B) == 16
