"""Between-workflow cache (`--cache`, $SNAKEMAKE_OUTPUT_CACHE): a second work directory with the
same model and settings computes nothing; a changed param recomputes only the jobs reading it;
the cached shards still carry the original computation's provenance."""

from __future__ import annotations

import re

import pytest
import yaml

from headgeom.io.shards import read_shard
from synth import write_llama
from tinyrun import CFG, merge, snakemake

pytestmark = pytest.mark.slow

TARGETS = [
    "results/shards/pk_within/tiny/layer0.parquet", "results/shards/pk_within/tiny/layer1.parquet",
    "results/shards/pk_cross/tiny/part0.parquet", "results/shards/pk_null_cross/tiny/block0/part0.parquet",
]


def _computed(text: str) -> set[str]:
    """Outputs computed in this run (Snakemake moves them into the cache, then links them back)."""
    return set(re.findall(r"Moving output file (\S+) to cache", text))


def _linked(text: str) -> set[str]:
    return set(re.findall(r"Symlinking output file (\S+) from cache", text))


def test_second_workdir_computes_nothing(tmp_path, snakemake_bin, root, monkeypatch):
    write_llama(tmp_path / "ckpt", n_layers=2)
    base = {"models": {"tiny": {"source": "local", "path": str(tmp_path / "ckpt")}}, **CFG}
    monkeypatch.setenv("SNAKEMAKE_OUTPUT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    runs = {}
    for name, cfg in (("w1", base), ("w2", base),
                      ("w3", merge(base, {"pk": {"self_permutations": 100}}))):
        w = tmp_path / name
        w.mkdir()
        (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        r = snakemake(snakemake_bin, root, w, *TARGETS, "--cache")
        runs[name] = (w, r.stdout + r.stderr)

    w1, t1 = runs["w1"]
    w2, t2 = runs["w2"]
    assert _computed(t1) >= set(TARGETS) | {"results/tensors/tiny/manifest.json"}
    # every output of w2, the fetch included, came from the cache; no job script ran there
    assert _computed(t2) == set() and _linked(t2) >= set(TARGETS) | {"results/tensors/tiny/manifest.json"}
    assert not any(p.stat().st_size for p in (w2 / "logs").rglob("*.log")), "a job ran in w2"
    for rel in TARGETS:
        a, b = read_shard(w1 / rel), read_shard(w2 / rel)
        assert (w1 / rel).read_bytes() == (w2 / rel).read_bytes() and a[1] == b[1]  # w1's file and provenance
        assert "run" in b[1] and "cache_key" not in b[1]["params"]
    # each layer has its own entry (wildcards are part of the key)
    assert set(read_shard(w2 / TARGETS[1])[0].column("layer").to_pylist()) == {1}

    # pk.self_permutations is read by pk_within_layer only: that job runs, the others come from the cache
    w3, t3 = runs["w3"]
    assert _computed(t3) == {*TARGETS[:2], "results/shards/pk_self/tiny/layer0.parquet",
                             "results/shards/pk_self/tiny/layer1.parquet"}, _computed(t3)
    assert (w3 / "logs/pk_within/tiny/layer0.log").stat().st_size > 0
