"""Property and fuzz tests (hypothesis) for everything that parses a file someone else wrote:
safetensors headers (local files and the hub's parser), GGUF files, the shard index JSON, the
config loader and the audit's provenance-sidecar reader (issue 11).

The property is always the same: an input either parses correctly or raises the project's own
error type, within a bounded time (hypothesis deadline per example), never a hang, a raw
exception, an allocation driven by a claimed size, or a path outside its root.

Budget: ``make test`` runs the "ci" profile (a few dozen examples per target, a few seconds
each); ``make fuzz`` runs the "fuzz" profile (HYPOTHESIS_PROFILE=fuzz, thousands of examples)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

# One place for the imports of the code under test (the package layout may move).
from headgeom.verify import audit as AUD
from headgeom.io import hub_ranges as HUB
from headgeom.io.files import write_recorded_json
from headgeom.io.checkpoint import (SafetensorsDir, check_safetensors_header, contained, open_checkpoint,
                                 read_weight_map)
from headgeom.core.config import check_config
from headgeom.core.errors import CheckpointError, ConfigError

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"

import fuzzprofiles  # noqa: E402,F401  (tests/helpers: the "ci" / "fuzz" hypothesis profiles)

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=8), ch, max_size=4),
                           max_leaves=12)
DTYPES = ["F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "X9"]


# ------------------------------------------------------------------ safetensors headers


@st.composite
def headers(draw):
    """Headers that are mostly well-formed, with hostile numbers mixed in."""
    n = draw(st.integers(0, 4))
    dims = st.integers(-3, 6) | st.sampled_from([2**31, 2**32, 2**62, 2**63, 2**64 + 1])
    entries, off = {}, 0
    for i in range(n):
        shape = draw(st.lists(dims, max_size=3))
        dtype = draw(st.sampled_from(DTYPES))
        honest = draw(st.booleans())
        if honest and all(0 <= s < 100 for s in shape) and dtype != "X9":
            size = int(np.prod(shape, dtype=object)) * {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2,
                                                       "I16": 2}.get(dtype, 1)
            b, e = off, off + size
        else:
            b = draw(st.integers(-2, 64) | st.just(10**12))
            e = draw(st.integers(-2, 200) | st.just(2**64))
        off = max(off, e if isinstance(e, int) else off)
        entry = {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}
        if draw(st.integers(0, 9)) == 0:  # now and then a broken entry
            entry = draw(st.dictionaries(st.sampled_from(["dtype", "shape", "data_offsets"]), json_values, max_size=3))
        entries[f"t{i}"] = entry
    if draw(st.booleans()):
        entries["__metadata__"] = {"format": "pt"}
    return entries


@given(headers(), st.integers(0, 512) | st.none())
def test_safetensors_header_parser_accepts_exactly_consistent_headers(header, extra):
    raw = json.dumps(header).encode()
    size = None if extra is None else 8 + len(raw) + extra
    try:
        out = check_safetensors_header(raw, size, "fuzz")
    except CheckpointError:
        return
    # accepted: every claim is true against the size, with exact integer arithmetic
    assert size is not None
    spans = []
    for k, (dtype, shape, b, e) in out.items():
        assert all(isinstance(s, int) and s >= 0 for s in shape)
        assert 0 <= b <= e and 8 + len(raw) + e <= size
        item = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}.get(dtype)
        if item is not None:
            n = 1
            for s in shape:
                n *= s
            assert n * item == e - b
        spans.append((b, e))
    spans.sort()
    assert all(b1 >= e0 for (_, e0), (b1, _) in zip(spans, spans[1:]))
    # the hub's parser is the same checker, with absolute offsets
    hub = HUB.parse_header(raw, size, "fuzz")
    assert {k: (t.start - 8 - len(raw), t.end - 8 - len(raw)) for k, t in hub.items()} == {k: (v[2], v[3]) for k, v in out.items()}


@given(st.binary(max_size=200))
def test_safetensors_header_parser_on_arbitrary_bytes(raw):
    try:
        check_safetensors_header(raw, 8 + len(raw) + 64, "fuzz")
    except CheckpointError:
        pass


def _read_all_or_checkpoint_error(open_ckpt) -> None:
    """Open a (damaged) checkpoint and read every tensor: either all of it reads, or a
    CheckpointError; any other exception fails the test."""
    try:
        ck = open_ckpt()
        for _ in ck.read(ck.keys()):
            pass
    except CheckpointError:
        pass


@pytest.fixture(scope="module")
def st_file(tmp_path_factory) -> bytes:
    from safetensors.numpy import save_file

    d = tmp_path_factory.mktemp("stf")
    rng = np.random.default_rng(0)
    save_file({"a": rng.standard_normal((3, 4)).astype(np.float32), "b": np.arange(6, dtype=np.int64),
               "c": rng.standard_normal(5).astype(np.float16)}, str(d / "m.safetensors"))
    return (d / "m.safetensors").read_bytes()


@given(data=st.data())
def test_local_safetensors_truncated_or_corrupted(tmp_path_factory, st_file, data):
    """A local shard cut or overwritten anywhere: SafetensorsDir + read() of every tensor give
    arrays or a CheckpointError."""
    d = tmp_path_factory.mktemp("stc")
    (d / "config.json").write_text("{}")
    buf = bytearray(st_file)
    cut = data.draw(st.integers(0, len(buf)))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    (d / "model.safetensors").write_bytes(bytes(buf[:cut]))
    _read_all_or_checkpoint_error(lambda: SafetensorsDir(d))


# ------------------------------------------------------------------ GGUF


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory) -> bytes:
    import gguf

    p = tmp_path_factory.mktemp("gg") / "m.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    w.add_array("tokenizer.ggml.scores", [0.5, 1.5, 2.5])
    w.add_string("general.name", "fuzz")
    w.add_tensor("t", np.arange(32, dtype=np.float32).reshape(4, 8))
    w.add_tensor("u", np.ones(16, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p.read_bytes()


@given(data=st.data())
def test_gguf_truncated_or_with_hostile_counts(tmp_path_factory, gguf_bytes, data):
    """GGUF bytes cut anywhere, with bytes overwritten, or with a 64-bit count replaced by a huge
    value: open_checkpoint + reading every tensor give arrays or a CheckpointError, fast."""
    buf = bytearray(gguf_bytes)
    how = data.draw(st.sampled_from(["cut", "flip", "count"]))
    if how == "cut":
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    else:
        i = data.draw(st.integers(0, len(buf) - 8))
        struct.pack_into("<Q", buf, i, data.draw(st.sampled_from([2**40, 2**63, 2**64 - 1, 2**32 + 1, 10**6])))
    p = tmp_path_factory.mktemp("ggc") / "m.gguf"
    p.write_bytes(bytes(buf))
    _read_all_or_checkpoint_error(lambda: open_checkpoint(p))


# ------------------------------------------------------------------ shard index JSON


@given(json_values)
def test_index_weight_map_from_any_json(doc):
    raw = json.dumps(doc).encode()
    try:
        wm = read_weight_map(raw, "fuzz")
    except CheckpointError:
        return
    assert isinstance(wm, dict) and wm and all(isinstance(v, str) and v for v in wm.values())


@given(st.binary(max_size=100))
def test_index_weight_map_from_any_bytes(raw):
    try:
        read_weight_map(raw, "fuzz")
    except CheckpointError:
        pass


names = st.lists(st.sampled_from(list("ab./\\~\0") + ["..", "/etc", "%2e"]), max_size=12).map("".join)


@given(names)
def test_contained_never_leaves_its_root(name):
    root = "/work/some/root"
    try:
        p = contained(root, name, "fuzz")
    except CheckpointError:
        return
    assert os.path.commonpath([root, str(p)]) == root and str(p) != root


# ------------------------------------------------------------------ config loader


@pytest.fixture(scope="module")
def base_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@given(data=st.data())
def test_config_loader_one_config_error_or_accepts(base_config, data):
    """The real config with one value (anywhere) replaced by a random JSON value."""
    import copy

    cfg = copy.deepcopy(base_config)
    paths = [p for p in _paths(cfg) if p]
    path = data.draw(st.sampled_from(paths))
    node = cfg
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = data.draw(json_values)
    try:
        check_config(cfg, SCHEMA)
    except ConfigError as e:
        assert str(e).startswith("config: ") and "\n" not in str(e)


@given(st.text(max_size=80))
def test_config_loader_on_arbitrary_yaml_text(text):
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError:
        return  # Snakemake's own loader reports YAML syntax errors
    try:
        check_config(cfg, SCHEMA)
    except ConfigError:
        pass


# ------------------------------------------------------------------ audit sidecar reader


path_parts = st.sampled_from(["results", "shards", "paper1_heads", "tiny", "..", ".", "", "/", "x.parquet", "/tmp", "~"])


@given(st.lists(path_parts, max_size=7).map("/".join), json_values)
def test_audit_sidecar_reader(tmp_path_factory, path, junk):
    w = tmp_path_factory.mktemp("sc")
    (w / "results/tables").mkdir(parents=True)
    prov = w / "results/tables/t.prov.json"
    # a sidecar as a table build writes it (its own record, naming its output), so only the path decides
    write_recorded_json(prov, {"inputs": [{"path": path, "provenance": {"model": "tiny"}}], "junk": junk,
                               "outputs": {}}, {"output": "t"})
    try:
        sc = AUD.load_sidecar(prov, w)
    except AUD.AuditError:
        return
    rec = sc["inputs"][0]["path"]
    full = os.path.normpath(os.path.join(w, rec))
    assert full.startswith(str(w) + os.sep + "results" + os.sep + "shards" + os.sep)


@given(json_values)
def test_audit_sidecar_reader_any_json(doc):
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        prov = Path(td) / "t.prov.json"
        prov.write_text(json.dumps(doc))
        try:
            AUD.load_sidecar(prov, Path(td))
        except AUD.AuditError:
            pass
