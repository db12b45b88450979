"""Fuzzing the hub reader as a whole (HubCheckpoint through fetch_model), issue 11.

A loopback hub (tests/helpers/hubserver.py) serves a tiny two-shard Llama checkpoint that
hypothesis damages: config.json, the index or a shard cut short, bytes flipped anywhere
(headers, tensor data, JSON), the header length word replaced by a hostile value, the whole
JSON document replaced, and server faults (connections dropped mid-body, error statuses,
Range ignored). The property: ``fetch_model`` either raises the project's own error type, or
succeeds and stores exactly the tensors that safetensors' own parser reads from the served
(possibly damaged) files. Never a raw exception, a hang (hypothesis deadline) or an
allocation driven by a claimed size.
"""

from __future__ import annotations

import itertools
import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import fuzzprofiles  # noqa: F401  (tests/helpers: the "ci" / "fuzz" hypothesis profiles)
from hubserver import FakeHub, isolate_hub_client

from headgeom.core.errors import HeadgeomError
from headgeom.io.fetch import fetch_model
from headgeom.io.store import TensorStore

REPO = "fuzz-org/tiny"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
CONFIG, INDEX = "config.json", "model.safetensors.index.json"
D, H, G, L, V = 32, 4, 2, 2, 64
_commit = itertools.count(1)


def _tiny_llama() -> dict[str, bytes]:
    """A tiny Llama checkpoint as served bytes: config, index and two shards."""
    from safetensors.numpy import save

    rng = np.random.default_rng(11)

    def w(*shape):
        return np.ascontiguousarray((rng.standard_normal(shape) * 0.1).astype(np.float32))

    dh = D // H
    shards: list[dict[str, np.ndarray]] = [{"model.embed_tokens.weight": w(V, D)}, {}]
    for layer in range(L):
        p, t = f"model.layers.{layer}.", shards[layer]
        t[p + "input_layernorm.weight"] = 1 + w(D)
        t[p + "self_attn.q_proj.weight"] = w(H * dh, D)
        t[p + "self_attn.k_proj.weight"] = w(G * dh, D)
        t[p + "self_attn.v_proj.weight"] = w(G * dh, D)
        t[p + "self_attn.o_proj.weight"] = w(D, H * dh)
    shards[1]["model.norm.weight"] = 1 + w(D)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
              "intermediate_size": 4 * D, "num_attention_heads": H, "num_key_value_heads": G,
              "num_hidden_layers": L, "vocab_size": V, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}
    files = {name: save(t, metadata={"format": "pt"}) for name, t in zip(SHARDS, shards)}
    index = {"metadata": {}, "weight_map": {k: name for name, t in zip(SHARDS, shards) for k in t}}
    files[CONFIG] = json.dumps(config).encode()
    files[INDEX] = json.dumps(index).encode()
    return files


BASE = _tiny_llama()
FILES = sorted(BASE)
json_docs = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**66), 2**66) | st.text(max_size=8),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=8), ch, max_size=3),
    max_leaves=8,
)


@st.composite
def damage(draw):
    """One or two kinds of damage, as short descriptions (applied by ``apply``), so that a
    failing example prints what was done, not the files."""
    ops = []
    for _ in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(FILES))
        size = len(BASE[name])
        kind = draw(st.sampled_from(["cut", "flip", "length", "json", "drop", "status", "norange"]))
        if kind == "cut":
            ops.append((name, "cut", draw(st.integers(0, size))))
        elif kind == "flip":
            ops.append((name, "flip", draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)),
                                                    min_size=1, max_size=4))))
        elif kind == "length" and name in SHARDS:  # the 8-byte header length, hostile
            ops.append((name, "length", draw(st.sampled_from([0, 7, 2**31, 2**40, 2**63, 2**64 - 1, size, size - 8]))))
        elif kind == "json" and name in (CONFIG, INDEX):
            ops.append((name, "json", draw(json_docs)))
        elif kind == "drop":
            ops.append((name, "drop", (draw(st.integers(0, size)), draw(st.integers(1, 9)))))
        elif kind == "status":
            ops.append((name, "status", (draw(st.sampled_from([401, 403, 404, 416, 500, 503])), draw(st.integers(1, 9)))))
        elif kind == "norange":
            ops.append((name, "norange", None))
    return ops


def apply(ops):
    """(served files, server faults, honour_range) after the damage ``ops``."""
    files, faults, honour_range = dict(BASE), [], True
    for name, kind, arg in ops:
        buf = bytearray(files[name])
        if kind == "cut":
            buf = buf[:arg]
        elif kind == "flip":
            for i, b in arg:
                if i < len(buf):
                    buf[i] = b
        elif kind == "length" and len(buf) >= 8:
            struct.pack_into("<Q", buf, 0, arg)
        elif kind == "json":
            buf = bytearray(json.dumps(arg).encode())
        elif kind in ("drop", "status"):
            faults.append((kind, name, *arg))
        elif kind == "norange":
            honour_range = False
        files[name] = bytes(buf)
    return files, faults, honour_range


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """A clean huggingface_hub environment (private HF_HOME, online, no token, fast retries)."""
    from huggingface_hub import close_session

    isolate_hub_client(tmp_path / "hf_home", monkeypatch, retry_base_s=0.001)
    close_session()
    yield monkeypatch
    close_session()


def _served_tensors(files: dict[str, bytes]) -> dict[str, np.ndarray] | None:
    """What safetensors' own parser reads from the served shards (None: it rejects one)."""
    from safetensors.numpy import load

    out = {}
    for name in SHARDS:
        try:
            out.update(load(files[name]))
        except Exception:
            return None
    return out


@given(damage())
@example(ops=[(CONFIG, "flip", [(0, 0x80)])])  # found by this test: a non-UTF-8 config.json raised UnicodeDecodeError
@example(ops=[(CONFIG, "json", [1, 2])])  # JSON that is not an object
# found by this test: a dtype safetensors does not define (" 32") on a tensor the fetch does not read
@example(ops=[("model-00001-of-00002.safetensors", "flip", [(78, 32)])])
def test_hub_checkpoint_on_a_damaged_repo(hub_env, capsys, ops):
    from huggingface_hub import constants

    files, faults, honour_range = apply(ops)
    sha = f"{next(_commit):040x}"  # a fresh commit per example: nothing cached carries over
    fake = FakeHub(REPO, {sha: files})
    fake.honour_range = honour_range
    for kind, name, arg, times in faults:
        (fake.drop_after if kind == "drop" else fake.fail_next)(name, arg, times)
    hub_env.setenv("HF_ENDPOINT", fake.endpoint)
    hub_env.setattr(constants, "ENDPOINT", fake.endpoint)
    hub_env.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "store"
            try:
                fetch_model("fz", {"source": "hf", "repo_id": REPO, "revision": "main"}, out, log=lambda s: None)
            except HeadgeomError:
                return  # a clear, specific error of the project's own type
            served = _served_tensors(files)
            assert served is not None, "fetched from shards that safetensors itself rejects"
            store = TensorStore(out)
            keys = sorted(store.manifest["tensors"])
            assert keys, "an empty store from a damaged repo"
            for k in keys:
                assert np.array_equal(store.get(k), served[k].astype(np.float64)), k
    finally:
        fake.close()
        capsys.readouterr()  # hub progress lines


def test_undamaged_repo_fetches_every_attention_tensor(hub_env, tmp_path):
    """The fuzz baseline: with no damage, the fetch succeeds and stores the served tensors."""
    from huggingface_hub import constants

    fake = FakeHub(REPO, {f"{next(_commit):040x}": BASE})
    hub_env.setattr(constants, "ENDPOINT", fake.endpoint)
    hub_env.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        fetch_model("fz", {"source": "hf", "repo_id": REPO, "revision": "main"}, tmp_path / "s", log=lambda s: None)
    finally:
        fake.close()
    store = TensorStore(tmp_path / "s")
    served = _served_tensors(BASE)
    keys = sorted(store.manifest["tensors"])
    assert len(keys) == 5 * L  # q, k, v, o and the input norm per layer
    assert all(np.array_equal(store.get(k), served[k].astype(np.float64)) for k in keys)
