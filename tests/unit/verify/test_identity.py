"""What a file is (headgeom.io.shards identity, headgeom.io.files recorded JSON,
headgeom.jobs.activation.forward_where): a sound file at another file's path, of another
checkpoint or of other config values is named as damage, never read; an edited JSON record is
refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from headgeom.core.errors import DamagedFileError
from headgeom.io.files import recorded_json, write_recorded_json
from headgeom.io.shards import config_digest, read_shards, shard_problems, shard_where, write_shard
from headgeom.jobs.activation import forward_where


def _shard(path, layer=0, params=None, store_sha="a" * 64):
    cols = {"model": np.array(["m"] * 3, dtype=object), "layer": np.full(3, layer), "x": np.arange(3.0)}
    write_shard(path, cols, {"job": "pk_within", "model": "m", "layer": layer, "params": params or {"k": 1},
                             "model_source": {"store_sha256": store_sha}})


def test_place_of_a_shard_is_read_from_its_path():
    assert shard_where("w/results/shards/pk_within/m/layer3.parquet") == {"family": "pk_within", "model": "m", "layer": 3}
    assert shard_where("/a/results/shards/pk_null_cross/m/block2/part11.parquet") == {
        "family": "pk_null_cross", "model": "m", "block": 2, "part": 11}
    assert shard_where("results/sensitivity/band=0.5/results/shards/pk_within/m/layer3/block0.parquet") == {
        "family": "pk_within", "model": "m", "layer": 3, "block": 0, "alt": "band=0.5"}
    for outside in ("x/layer3.parquet", "results/shards/pk_within/m/foo3.parquet", "results/shards/pk_within/m/layer1/layer2.parquet"):
        assert shard_where(outside) is None, outside


def test_a_sound_shard_at_another_shards_path_is_damage(tmp_path):
    root = tmp_path / "results/shards/pk_within/m"
    root.mkdir(parents=True)
    _shard(root / "layer0.parquet", 0)
    _shard(root / "layer1.parquet", 1)
    assert shard_problems(root / "layer0.parquet") == []
    for dst in (root / "layer1.parquet", tmp_path / "results/shards/pk_within/other/layer0.parquet",
                tmp_path / "results/shards/pk_cross/m/layer0.parquet",
                tmp_path / "results/shards/pk_within/m/layer0/block1.parquet"):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / "layer0.parquet", dst)
        probs = shard_problems(dst)
        assert len(probs) == 1 and "it is the shard of pk_within/m/layer0, not of" in probs[0], (dst, probs)
        with pytest.raises(DamagedFileError, match="a sound shard at another shard's path"):
            read_shards([dst])


def test_a_shard_of_another_checkpoint_or_config_is_damage(tmp_path):
    p = tmp_path / "results/shards/pk_within/m/layer0.parquet"
    p.parent.mkdir(parents=True)
    _shard(p, params={"k": 1}, store_sha="a" * 64)
    assert shard_problems(p) == []  # no store beside it: the checkpoint is not compared
    store = tmp_path / "results/tensors/m"
    store.mkdir(parents=True)
    (store / "manifest.json").write_text(json.dumps({"store_sha256": "b" * 64}))
    assert "computed from another checkpoint" in shard_problems(p)[0]
    (store / "manifest.json").write_text(json.dumps({"store_sha256": "a" * 64, "x": 1}))
    assert shard_problems(p) == []
    assert shard_problems(p, config=config_digest({"k": 1})) == []
    assert "computed with other config values" in shard_problems(p, config=config_digest({"k": 2}))[0]


def test_a_shard_without_an_identity_is_named(tmp_path, monkeypatch):
    """An older headgeom's shard (a content record, no identity) is named, not read as this one."""
    import headgeom.io.shards as S

    p = tmp_path / "layer0.parquet"
    with monkeypatch.context() as m:
        m.setattr(S, "IDENTITY", "not_the_identity")
        _shard(p)
    assert shard_problems(p)[0].startswith("has no identity record")


def test_recorded_json_refuses_an_edit_and_another_identity(tmp_path):
    p = tmp_path / "row.json"
    write_recorded_json(p, {"row": {"changed": 2, "x": float("nan")}}, {"alternative": "a=1"})
    obj, probs = recorded_json(p, {"alternative": "a=1"})
    assert probs == [] and obj["row"]["changed"] == 2
    assert "not of alternative 'a=2'" in recorded_json(p, {"alternative": "a=2"})[1][0]
    p.write_text(p.read_text().replace('"changed": 2', '"changed": 5'))
    assert "does not match its record (an edited value)" in recorded_json(p)[1][0]
    p.write_text(json.dumps({"row": {"changed": 5}}))
    assert "has no content record" in recorded_json(p)[1][0]
    assert "is missing" in recorded_json(tmp_path / "none.json")[1][0]


def test_place_of_a_forward_pass_is_read_from_its_path():
    assert forward_where("w/results/activations/m/wiki/8x64") == {"model": "m", "corpus": "wiki", "n_windows": 8,
                                                                   "window": 64}
    assert forward_where("results/sensitivity/cut=x/results/activations/m/wiki/8x64")["alt"] == "cut=x"
    assert forward_where("w/results/activations/m/wiki") is None
