"""Snakemake runs a shard family added through the registry alone (tests/helpers/toy_family.py,
HEADGEOM_PLUGINS): its rule is generated, its shards are written with their provenance."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import yaml

from headgeom.io.shards import read_shard
from headgeom.io.store import TensorStore
from synth import write_llama
from plugins import plugin_env

pytestmark = pytest.mark.slow


def test_snakemake_builds_the_plugin_family(tmp_path, snakemake_bin, root):
    write_llama(tmp_path / "ckpt", shards=1)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "models": {"tiny": {"source": "local", "path": str(tmp_path / "ckpt")}}, "active_models": ["tiny"]}))
    targets = [f"results/shards/toy_wo_norm/tiny/layer{l}.parquet" for l in (0, 1)]
    r = subprocess.run([snakemake_bin, *targets, "-s", str(root / "Snakefile"), "-d", str(tmp_path), "-c2",
                        "--configfile", str(tmp_path / "cfg.yaml")],
                       env=plugin_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    store = TensorStore(tmp_path / "results/tensors/tiny")
    for layer, path in enumerate(targets):
        t, prov = read_shard(tmp_path / path)
        W_O = store.layer_factors(layer).W_O
        assert np.allclose(np.asarray(t.column("wo_fro")), [np.linalg.norm(w) for w in W_O])
        assert prov["job"] == "toy_wo_norm" and prov["layer"] == layer
        assert (tmp_path / f"logs/toy_wo_norm/tiny/layer{layer}.log").exists()
