"""Crafted inputs from issue 11: every one of them either parses correctly or raises the
project's own error, fast, without reading or writing outside its root."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# One place for the imports of the code under test (the package layout may move).
from headgeom.verify import audit as AUD
from headgeom.io import hub_ranges as HUB
from headgeom.io import store as STORE
from headgeom.io.checkpoint import SafetensorsDir, check_gguf, check_safetensors_header, open_checkpoint
from headgeom.core.errors import CheckpointError
from headgeom.io.fetch import fetch_model
from synth import write_llama

AUDIT_MOD = AUD.__name__
CKPT_MOD = open_checkpoint.__module__


# ------------------------------------------------------------------ GGUF


def gguf_bomb(item_type: int = 0, count: int = 1 << 40) -> bytes:
    """50 bytes: one metadata array field of ``item_type`` claiming ``count`` items."""
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2) + b"ab" + struct.pack("<IIQ", 9, item_type, count)


@pytest.mark.parametrize("item_type", [0, 4, 7, 12])
def test_gguf_array_claiming_2_40_items_fails_fast(tmp_path, item_type):
    """Before the fix gguf's reader spun on this (60 s and more): run it in a child process
    with a deadline so a regression fails instead of hanging the suite."""
    p = tmp_path / "bomb.gguf"
    p.write_bytes(gguf_bomb(item_type))
    assert p.stat().st_size == 50
    code = (f"import sys; from {CKPT_MOD} import open_checkpoint\n"
            "from headgeom.core.errors import CheckpointError\n"
            f"try:\n    open_checkpoint({str(p)!r})\nexcept CheckpointError as e:\n    print('CheckpointError', e); sys.exit(0)\n"
            "sys.exit(3)")
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("opening a 50-byte GGUF did not finish in 30 s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "claims" in r.stdout and time.monotonic() - t0 < 30


def test_gguf_tensor_extent_past_eof_is_refused(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "ok.gguf"), "llama")
    w.add_tensor("t", np.ones((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    good = (tmp_path / "ok.gguf").read_bytes()
    check_gguf(tmp_path / "ok.gguf")  # the honest file passes
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[:-16])  # last tensor bytes missing
    with pytest.raises(CheckpointError, match="past the end|extends"):
        open_checkpoint(cut)


def test_gguf_truncated_anywhere_is_a_checkpoint_error(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "ok.gguf"), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("t", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    good = (tmp_path / "ok.gguf").read_bytes()
    for n in range(0, len(good) - 32, 7):  # the last 16 bytes are alignment padding
        p = tmp_path / f"t{n}.gguf"
        p.write_bytes(good[:n])
        with pytest.raises(CheckpointError):
            open_checkpoint(p)


# ------------------------------------------------------------------ safetensors: index and headers


def _sharded(tmp_path) -> Path:
    write_llama(tmp_path / "ck", shards=2, n_layers=1)
    return tmp_path / "ck"


@pytest.mark.parametrize("name", ["../outside/model.safetensors", "/etc/hostname", "sub/../../x.safetensors"])
def test_index_shard_names_cannot_leave_the_checkpoint_dir(tmp_path, name):
    ck = _sharded(tmp_path)
    out = tmp_path / "outside"
    out.mkdir()
    (out / "model.safetensors").write_bytes((ck / "model-00001-of-00002.safetensors").read_bytes())
    idx = json.loads((ck / "model.safetensors.index.json").read_text())
    k = next(iter(idx["weight_map"]))
    idx["weight_map"][k] = name
    (ck / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(CheckpointError, match="outside|leaves"):
        SafetensorsDir(ck)


@pytest.mark.parametrize("text", ['{"weight_map": ["a", "b"]}', "{not json", '[1, 2]', '{"weight_map": {"a": 3}}',
                                  '{"metadata": {}}', '{"weight_map": {"a": null}}'])
def test_malformed_index_json_is_a_checkpoint_error(tmp_path, text):
    ck = _sharded(tmp_path)
    (ck / "model.safetensors.index.json").write_text(text)
    with pytest.raises(CheckpointError, match="index"):
        SafetensorsDir(ck)


def st_header(entries: dict, pad_to: int | None = None) -> tuple[bytes, int]:
    raw = json.dumps(entries).encode()
    return struct.pack("<Q", len(raw)) + raw, len(raw)


@pytest.mark.parametrize("shape,span", [([2**40, 2**40, 2**40], 8), ([-1, -4], 16), ([3, -2], 0), ([2**63, 2], 0)])
def test_shape_products_are_exact_and_dims_non_negative(shape, span):
    """np.prod in int64 overflowed ([2^63, 2] -> 0 bytes matches a 0-byte span) and negative
    dims passed; Python ints and a non-negative check refuse both."""
    head = {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, span]}}
    raw = json.dumps(head).encode()
    with pytest.raises(CheckpointError):
        check_safetensors_header(raw, file_size=8 + len(raw) + span, where="x")


@pytest.mark.parametrize("entry", [
    {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]},
    {"dtype": "F32", "shape": "ab", "data_offsets": [0, 8]},
    {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]},
    {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]},
    {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]},
    {"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]},
    {"dtype": 7, "shape": [2], "data_offsets": [0, 8]},
    [1, 2, 3],
])
def test_bad_header_entries_are_checkpoint_errors(entry):
    raw = json.dumps({"w": entry}).encode()
    with pytest.raises(CheckpointError):
        check_safetensors_header(raw, file_size=8 + len(raw) + 8, where="x")


def test_a_dtype_safetensors_does_not_define_is_refused_and_sub_byte_spans_are_checked():
    """Every entry of the header is checked, also one whose tensor is never read; safetensors' own
    parser is the reference for which names are dtypes."""
    from safetensors.numpy import load

    entry = {"dtype": " 32", "shape": [2], "data_offsets": [0, 8]}
    raw = json.dumps({"w": entry}).encode()
    blob = len(raw).to_bytes(8, "little") + raw + bytes(8)
    with pytest.raises(Exception):
        load(blob)
    with pytest.raises(CheckpointError, match="does not define"):
        check_safetensors_header(raw, file_size=len(blob), where="x")
    ok = json.dumps({"w": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}).encode()  # 4 x 4 bits
    assert check_safetensors_header(ok, file_size=8 + len(ok) + 2, where="x")["w"][0] == "F4"
    bad = json.dumps({"w": {"dtype": "F4", "shape": [4], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(CheckpointError, match="spans 4"):
        check_safetensors_header(bad, file_size=8 + len(bad) + 4, where="x")


def test_span_past_eof_is_refused_and_unknown_size_is_not_trusted():
    raw = json.dumps({"w": {"dtype": "U8", "shape": [10**12], "data_offsets": [0, 10**12]}}).encode()
    with pytest.raises(CheckpointError, match="outside"):
        check_safetensors_header(raw, file_size=8 + len(raw) + 100, where="x")
    with pytest.raises(CheckpointError, match="size"):
        check_safetensors_header(raw, file_size=None, where="x")


def test_local_safetensors_shard_with_span_past_eof(tmp_path):
    ck = tmp_path / "ck"
    write_llama(ck, n_layers=1)
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").write_bytes(data[: len(data) - 64])
    with pytest.raises(CheckpointError):
        SafetensorsDir(ck)


def test_hub_header_check_uses_exact_ints(monkeypatch):
    """The hub path runs the same checker on the header bytes it fetched."""
    raw = json.dumps({"w": {"dtype": "F32", "shape": [2**63, 2], "data_offsets": [0, 0]}}).encode()
    with pytest.raises(CheckpointError):
        HUB.parse_header(raw, size=8 + len(raw), where="repo: shard")


# ------------------------------------------------------------------ audit: paths from prov files


def test_audit_recompute_cannot_write_outside_its_root(tmp_path):
    escape = tmp_path / "escaped"
    rel = os.path.relpath(escape / "x.parquet", tmp_path / "out")
    p = f"results/shards/paper1_heads/../../../{rel}"  # normalizes to ../escaped/x.parquet
    provs = {p: {"job": "paper1_heads", "model": "tiny", "layer": 0, "params": {}}}
    with pytest.raises(AUD.AuditError, match="leaves"):
        AUD.recompute_shards([p], provs, tmp_path / "work", tmp_path / "out")
    assert not escape.exists()


@pytest.mark.parametrize("model", ["../../../etc", "/abs", "a/b"])
def test_audit_model_names_from_prov_cannot_leave_the_store_root(tmp_path, model):
    p = "results/shards/paper1_heads/tiny/layer0.parquet"
    provs = {p: {"job": "paper1_heads", "model": model, "layer": 0, "params": {}}}
    with pytest.raises(AUD.AuditError, match="model"):
        AUD.recompute_shards([p], provs, tmp_path / "work", tmp_path / "out")


def test_audit_refuses_sidecar_inputs_outside_the_workdir(tmp_path):
    work = tmp_path / "work"
    (work / "results" / "tables").mkdir(parents=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"x")
    (work / "results/tables/p1_table2_strong_tail.csv").write_text("model,P\ntiny,0.5\n")
    (work / "results/tables/p1_table2_strong_tail.prov.json").write_text(json.dumps(
        {"table": "p1_table2_strong_tail", "params": {}, "inputs": [
            {"path": "results/shards/paper1_heads/../../../../secret.bin", "sha256": "0", "provenance": {"model": "tiny"}}]}))
    with pytest.raises(AUD.AuditError, match="leaves"):
        AUD.audit(work, "p1_table2_strong_tail", ["model=tiny"], "P", tensors=False)


@pytest.mark.parametrize("text", ["{", "[]", '{"inputs": 5}', '{"inputs": [{"path": 3}]}', '{"inputs": [7]}'])
def test_audit_unreadable_sidecar_is_an_audit_error(tmp_path, text):
    work = tmp_path / "work"
    (work / "results" / "tables").mkdir(parents=True)
    (work / "results/tables/p1_table2_strong_tail.csv").write_text("model,P\ntiny,0.5\n")
    (work / "results/tables/p1_table2_strong_tail.prov.json").write_text(text)
    with pytest.raises(AUD.AuditError):
        AUD.audit(work, "p1_table2_strong_tail", ["model=tiny"], "P", tensors=False)


# ------------------------------------------------------------------ concurrent extracts


def test_concurrent_extract_into_one_store_is_refused(tmp_path):
    write_llama(tmp_path / "ck", n_layers=1)
    out = tmp_path / "store"
    with STORE.store_lock(out, "tiny"):
        with pytest.raises(CheckpointError, match="another"):
            fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, out, log=lambda s: None)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, out, log=lambda s: None)  # lock released
    assert (out / STORE.MANIFEST).exists()
