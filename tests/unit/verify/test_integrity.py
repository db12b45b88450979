"""A shard's content record (headgeom.io.shards): every flipped bit, truncation or foreign file is
named as damaged, never read as data; stale temp files of killed writers go; the config messages
and the figure layer index that used to clamp."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headgeom.core.config import check_config
from headgeom.core.errors import CheckpointError, ConfigError, DamagedFileError
from headgeom.io.checkpoint import open_checkpoint
from headgeom.io.files import write_text
from headgeom.io.shards import CONTENT_KEY, read_shard, read_shards, shard_problems, write_shard
from headgeom.core.config import ROOT
from headgeom.outputs.pk.within_layer import pick_layer

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def _shard(path, n=200, seed=0):
    rng = np.random.default_rng(seed)
    cols = {"model": np.array(["m"] * n, dtype=object), "layer": np.full(n, 3), "head": np.arange(n),
            "P": rng.random(n), "strong": rng.random(n) > 0.5,
            "spectrum": np.array([rng.random(3) for _ in range(n)] + [None], dtype=object)[:n]}
    write_shard(path, cols, {"job": "test", "model": "m", "layer": 3})
    return cols


def _same(a: dict, b: dict) -> bool:
    def norm(v):
        return [x.tolist() if isinstance(x, np.ndarray) else x for x in v.tolist()]
    return set(a) == set(b) and all(norm(a[c]) == norm(b[c]) for c in a)


def test_sound_shard_reads_with_its_record(tmp_path):
    p = tmp_path / "layer3.parquet"
    cols = _shard(p)
    assert shard_problems(p) == []
    got, provs = read_shards([p])
    assert _same(got, cols)
    assert provs[0]["provenance"]["layer"] == 3
    meta = pq.ParquetFile(p).metadata
    assert CONTENT_KEY in meta.metadata
    # page checksums are written (a page's CRC is in its header; pyarrow reads it back when asked)
    with pq.ParquetFile(p, page_checksum_verification=True) as f:
        f.read()


def test_every_single_bit_flip_is_caught_or_harmless(tmp_path):
    """Random single-bit flips anywhere in the file: each either stops the read as damage or
    leaves data and provenance exactly as written (a bit of the footer's column statistics,
    which no reader uses); none is read as different data."""
    p = tmp_path / "layer3.parquet"
    _shard(p)
    good = p.read_bytes()
    ref, ref_prov = read_shards([p])
    rnd = random.Random(7)
    caught = harmless = 0
    for _ in range(200):
        b = bytearray(good)
        i = rnd.randrange(len(b))
        b[i] ^= 1 << rnd.randrange(8)
        p.write_bytes(bytes(b))
        try:
            got, prov = read_shards([p])
        except DamagedFileError as e:
            assert str(p) in str(e) and "rebuild it: snakemake" in str(e)
            caught += 1
            continue
        assert _same(got, ref) and prov[0]["provenance"] == ref_prov[0]["provenance"], f"flip at byte {i} read silently"
        harmless += 1
    assert caught >= 180, (caught, harmless)


def test_truncated_empty_and_foreign_files_are_damaged(tmp_path):
    p = tmp_path / "layer3.parquet"
    _shard(p)
    good = p.read_bytes()
    for cut, why in ((len(good) // 2, "no Parquet footer"), (5, "too short"), (0, "too short")):
        p.write_bytes(good[:cut])
        assert why in shard_problems(p)[0]
        with pytest.raises(DamagedFileError, match=why):
            read_shard(p)
    # a Parquet file without a content record (not written by write_shard) is not a shard to trust
    pq.write_table(pa.table({"x": [1.0]}).replace_schema_metadata({b"headgeom": b"{}"}), p)
    assert "has no content record" in shard_problems(p)[0]
    pq.write_table(pa.table({"x": [1.0]}), p)
    assert "not a headgeom shard" in shard_problems(p)[0]
    assert "unreadable" in shard_problems(tmp_path / "missing.parquet")[0]


def test_a_shard_whose_record_is_replaced_does_not_pass(tmp_path):
    """Rewriting the data with another record than its own (the record is of the data pages,
    provenance and layout together): a shard with another's provenance is damaged."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _shard(a, seed=1)
    _shard(b, seed=2)
    t = pq.read_table(a)
    other = pq.ParquetFile(b).metadata.metadata[CONTENT_KEY]
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, CONTENT_KEY: other}), a)
    assert shard_problems(a)


def test_stale_temp_files_of_a_killed_writer_are_removed(tmp_path):
    target = tmp_path / "layer0.parquet"
    stale = tmp_path / ".layer0.parquet.tmp-killed"
    other = tmp_path / ".layer1.parquet.tmp-other"
    stale.write_bytes(b"partial")
    other.write_bytes(b"another job's")
    _shard(target)
    assert not stale.exists() and other.exists() and not shard_problems(target)
    write_text(tmp_path / "x[1].txt", "a")  # a name with glob characters
    assert (tmp_path / "x[1].txt").read_text() == "a"


def test_figure_layer_index_out_of_range_is_an_error_not_a_clamp():
    assert pick_layer(-1, 30) == 29 and pick_layer(0, 30) == 0 and pick_layer("middle", 30) == 15
    assert pick_layer(-30, 30) == 0 and pick_layer(29, 30) == 29
    for bad in (30, 99999, -31, -99999):
        with pytest.raises(ConfigError, match=f"figures.pk_rho_layer: layer {bad} is outside the model"):
            pick_layer(bad, 30)


def test_yaml_string_number_message_says_why():
    import yaml

    from headgeom.core.config import load_config

    cfg = load_config(overrides=yaml.safe_load("rank_rtol: 1e-6\n"))
    with pytest.raises(ConfigError, match=r"YAML reads 1e-6 as text, not a number: write 1\.0e-6"):
        check_config(cfg, SCHEMA)
    cfg = load_config(overrides={"rank_rtol": "abc"})
    with pytest.raises(ConfigError) as e:
        check_config(cfg, SCHEMA)
    assert "YAML reads" not in str(e.value)


def test_non_checkpoint_files_say_what_they_are(tmp_path):
    text = tmp_path / "model.bin"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match="named like a pickle checkpoint but is a 6-byte text file"):
        open_checkpoint(text)
    pickle_file = tmp_path / "pytorch_model.bin"
    pickle_file.write_bytes(b"\x80\x04\x95" + bytes(20))
    with pytest.raises(CheckpointError, match="is a pickle-format checkpoint; headgeom never unpickles"):
        open_checkpoint(pickle_file)
    st = tmp_path / "model.safetensors"
    st.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(CheckpointError, match="is a single .safetensors file"):
        open_checkpoint(st)


def test_a_renamed_column_in_the_footer_is_damage(tmp_path):
    """The footer's schema names the columns; a changed name (same length) is caught by the
    record's layout, not read as a shard without the column."""
    p = tmp_path / "layer3.parquet"
    _shard(p)
    b = p.read_bytes()
    assert b.count(b"strong") >= 1
    p.write_bytes(b.replace(b"strong", b"strung"))
    assert shard_problems(p) == ["its content does not match its record (a changed byte)"]


def test_activation_layer_file_is_checked_against_its_forward_json(tmp_path):
    import json

    from safetensors.numpy import save_file

    from headgeom.io.files import sha256_file, write_recorded_json
    from headgeom.jobs.activation import FORWARD_SUMMARY, layer_file, read_layer

    p = layer_file(tmp_path, 0)
    save_file({"z": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(p), metadata={"headgeom": "{}"})
    write_recorded_json(tmp_path / FORWARD_SUMMARY, {"files": {p.name: sha256_file(p)}}, {"where": None})
    arrays, _ = read_layer(tmp_path, 0)
    assert arrays["z"].shape == (3, 4)
    good = (tmp_path / FORWARD_SUMMARY).read_text()
    # forward.json edited to vouch for other bytes: its own record refuses it
    (tmp_path / FORWARD_SUMMARY).write_text(json.dumps({**json.loads(good), "files": {p.name: "0" * 64}}))
    with pytest.raises(DamagedFileError, match=r"forward\.json: its content does not match its record \(an edited"):
        read_layer(tmp_path, 0)
    (tmp_path / FORWARD_SUMMARY).write_text(good)
    b = bytearray(p.read_bytes())
    b[-1] ^= 0x01  # the last value's lowest bit
    p.write_bytes(bytes(b))
    with pytest.raises(DamagedFileError, match=r"layer0\.safetensors is damaged: its content does not match the "
                                               r"sha256 its forward\.json records; rebuild it: snakemake -c2 --force"):
        read_layer(tmp_path, 0)


def test_shards_of_a_renamed_or_unknown_family_are_named_not_read(tmp_path, monkeypatch):
    """A results tree written before a family was renamed (the within-layer pairs, now pk_within) or
    holding a family nobody registers: verify names each such directory once, with its shard
    count, as stale (with the new name) or unknown, read by nothing; the load check says the same
    line and forces no rebuild of it."""
    from types import SimpleNamespace

    from headgeom.schedule.families import RENAMED_FAMILIES
    from headgeom.verify import integrity

    (old, new), = [(o, n) for o, n in RENAMED_FAMILIES.items() if n == "pk_within"]
    for layer in (0, 1):
        _shard(tmp_path / f"results/shards/{old}/m/layer{layer}.parquet")
    _shard(tmp_path / "results/shards/nope/m/layer0.parquet")
    n, problems = integrity._shard_problems(tmp_path, SimpleNamespace(shards={}), threads=1)
    assert n == 0  # none of them is checked (or read) as a shard
    by_path = {p.path: p for p in problems}
    assert set(by_path) == {f"results/shards/{old}", "results/shards/nope"}
    stale, unknown = by_path[f"results/shards/{old}"], by_path["results/shards/nope"]
    assert stale.label() == "stale" and f"2 shard(s) of the family '{old}', since renamed '{new}'" in stale.what
    assert f"the run writes results/shards/{new})" in stale.what
    assert unknown.label() == "unknown" and "1 shard(s) of no known shard family" in unknown.what and new in unknown.what
    assert stale.force is None and unknown.force is None and stale.rebuild.endswith(f"rm -r results/shards/{old}")

    monkeypatch.setattr(integrity, "run_problems", lambda *a, **k: (0, problems))
    said = []
    assert integrity.to_rebuild({}, tmp_path, say=said.append) == []
    assert said == [f"headgeom: {p.path} is {p.kind}: {p.what}; {p.rebuild}" for p in problems]
