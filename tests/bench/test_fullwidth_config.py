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


def test_a_run_starts_without_the_shards_of_an_earlier_run(tmp_path, monkeypatch):
    """An earlier run's shards, laid out by another code or config, would be rebuilt by the workflow inside the
    first measured job's window: the bench removes them before it measures anything (and keeps the store)."""
    work = tmp_path / "run"
    stale = work / "results" / "shards" / "pk_null_cross" / fullwidth.MODEL / "block0" / "part0.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier layout")
    store = work / "results" / "tensors" / fullwidth.MODEL / "manifest.json"
    store.parent.mkdir(parents=True)
    store.write_text('{"fields": {}}')
    seen = []

    def measured(w, cfg, target, rule, period=0.2):
        seen.append((target, stale.exists()))
        return {"wall_s": 1.0, "job_s": 1.0, "cpu_s": 1.0, "peak_rss_mib": 1, "job_rss_mib": 1}

    monkeypatch.setattr(fullwidth, "run_one", measured)
    monkeypatch.setattr(fullwidth, "node_gemm_gflops", lambda: 50.0)
    monkeypatch.setattr(fullwidth, "_requests_fetch", lambda w, cfg, m: {"mem_mb": 100, "runtime": 5})
    monkeypatch.setattr(fullwidth, "_requests", lambda w, cfg: {})
    fullwidth.run(tmp_path, tmp_path / "ckpt", ["fetch"], 10.0, tmp_path / "out.json")
    assert seen == [(f"results/tensors/{fullwidth.MODEL}/manifest.json", False)]
    assert store.exists()
