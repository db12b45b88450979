"""headgeom.io.hub (and its online half, headgeom.io.hub_ranges) against a loopback hub
(tests/helpers/hubserver.py): partial fetch by byte ranges, resume after a dropped connection, commit
pinning, offline cache, token handling."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from hubserver import FakeHub, isolate_hub_client

import headgeom.io.hub as hub
import headgeom.io.hub_ranges as hub_ranges
from headgeom.adapters import adapter_for
from headgeom.io.checkpoint import SafetensorsDir
from headgeom.core.errors import CheckpointError, IntegrityError
from headgeom.io.fetch import fetch_model
from headgeom.io.files import sha256_bytes
from headgeom.io.store import TensorStore

REPO = "tiny-org/tiny-llama"
SHA_A = "a1" * 20
SHA_B = "b2" * 20
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
TOKEN = "hf_TopSecretTokenValue0123456789"

D, H, G, L, I, V = 64, 4, 2, 2, 1024, 1000  # d_model, heads, kv heads, layers, MLP width, vocab
DH = D // H


# --------------------------------------------------------------------------- fixtures


def make_llama(path: Path, seed: int) -> dict[str, np.ndarray]:
    """A tiny Llama checkpoint in 2 shards + index; the MLP and embeddings dominate the bytes."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)

    def w(*shape):
        return np.ascontiguousarray((rng.standard_normal(shape) * 0.05).astype(np.float32))

    per_shard: list[dict[str, np.ndarray]] = [{}, {}]
    per_shard[0]["model.embed_tokens.weight"] = w(V, D)
    for layer in range(L):
        p = f"model.layers.{layer}."
        t = per_shard[0 if layer == 0 else 1]
        t[p + "input_layernorm.weight"] = np.ascontiguousarray(1 + w(D))
        t[p + "self_attn.q_proj.weight"] = w(H * DH, D)
        t[p + "self_attn.k_proj.weight"] = w(G * DH, D)
        t[p + "self_attn.v_proj.weight"] = w(G * DH, D)
        t[p + "self_attn.o_proj.weight"] = w(D, H * DH)
        t[p + "post_attention_layernorm.weight"] = np.ascontiguousarray(1 + w(D))
        t[p + "mlp.gate_proj.weight"] = w(I, D)
        t[p + "mlp.up_proj.weight"] = w(I, D)
        t[p + "mlp.down_proj.weight"] = w(D, I)
    per_shard[1]["model.norm.weight"] = np.ascontiguousarray(1 + w(D))
    per_shard[1]["lm_head.weight"] = w(V, D)

    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": D,
        "intermediate_size": I,
        "num_attention_heads": H,
        "num_key_value_heads": G,
        "num_hidden_layers": L,
        "vocab_size": V,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    weight_map, everything = {}, {}
    for name, tensors in zip(SHARDS, per_shard):
        save_file(tensors, str(path / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
        everything.update(tensors)
    index = {"metadata": {"total_size": sum(a.nbytes for a in everything.values())}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return everything


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """Two commits of the same repo: A (main) and B (branch 'dev', different weights)."""
    root = tmp_path_factory.mktemp("repo")
    return {SHA_A: (root / "A", make_llama(root / "A", seed=1)), SHA_B: (root / "B", make_llama(root / "B", seed=2))}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A clean huggingface_hub environment: private HF_HOME, online, no token, fast retries."""
    from huggingface_hub import close_session

    home = tmp_path / "hf_home"
    isolate_hub_client(home, monkeypatch, retry_base_s=0.02)
    close_session()  # the next client picks up this environment (proxies)
    yield home
    close_session()


def serve(monkeypatch, repos, *, token=None) -> FakeHub:
    fake = FakeHub(REPO, {sha: d for sha, (d, _) in repos.items()}, {"main": SHA_A, "dev": SHA_B}, token=token)
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    # huggingface_hub reads HF_ENDPOINT at import: patch what it derived from it
    monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    return fake


@pytest.fixture
def fake(env, repos, monkeypatch):
    f = serve(monkeypatch, repos)
    yield f
    f.close()


def wanted_keys(config: dict, keys) -> list[str]:
    adapter = adapter_for(config, "safetensors")
    prefix = adapter.fields(config, keys).prefix
    return [k for k in keys if adapter.wanted(k, prefix)]


def header_bytes(path: Path) -> int:
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def assert_store_matches(out: Path, arrays: dict[str, np.ndarray], keys) -> dict:
    store = TensorStore(out)
    manifest = store.manifest
    assert sorted(manifest["tensors"]) == sorted(keys)
    for k in keys:
        assert manifest["tensors"][k]["sha256"] == sha256_bytes(arrays[k]), k
        got = store.get(k)  # checks the stored bytes against the manifest again
        assert np.array_equal(got, arrays[k].astype(np.float64)), k
    return manifest


# --------------------------------------------------------------------------- tests


def test_partial_fetch_transfers_little_more_than_the_needed_tensors(fake, repos, tmp_path, capsys):
    d, arrays = repos[SHA_A]
    config = json.loads((d / "config.json").read_text())
    need = wanted_keys(config, list(arrays))
    assert len(need) == 5 * L  # q, k, v, o, input_layernorm per layer

    fake.reset()
    out = tmp_path / "store"
    lines: list[str] = []
    fetch_model("tiny", {"source": "hf", "repo_id": REPO, "revision": "main"}, out, log=lines.append)
    # sources.open_source does not pass fetch_model's log on, so hub logs with its default, print
    printed = capsys.readouterr().out.splitlines() + lines
    manifest = assert_store_matches(out, arrays, need)

    checkpoint_bytes = sum((d / s).stat().st_size for s in SHARDS)
    tensor_bytes = sum(arrays[k].nbytes for k in need)
    headers = sum(header_bytes(d / s) for s in SHARDS)
    small_files = (d / "config.json").stat().st_size + (d / "model.safetensors.index.json").stat().st_size
    api = fake.sent_by_kind["api"]  # the model-info JSON that resolves the commit and lists the files
    bound = tensor_bytes + headers + small_files + api
    sent = fake.repo_bytes_sent
    ratio = sent / bound
    report = (
        f"bytes sent {sent}; needed tensors {tensor_bytes} + shard headers {headers} + config/index "
        f"{small_files} + model info {api} = {bound}; ratio {ratio:.4f}; checkpoint {checkpoint_bytes} "
        f"({100 * sent / checkpoint_bytes:.2f}% of it)"
    )
    print("\n" + report)
    assert sent <= 1.05 * bound, report
    assert tensor_bytes < 0.1 * checkpoint_bytes  # attention is a minority: the bound means something
    assert sent < 0.12 * checkpoint_bytes

    src = manifest["source"]
    assert src["type"] == "hf" and src["repo_id"] == REPO and src["revision"] == "main"
    assert src["commit_sha"] == SHA_A
    assert src["bytes_fetched"] == sent  # client and server agree on every body byte
    assert src["bytes_total"] == checkpoint_bytes
    assert src["tensors_fetched"] == len(need)
    files = {f["name"]: f for f in src["files"]}
    assert set(files) == {"config.json", "model.safetensors.index.json", *SHARDS}
    for name, f in files.items():
        data = (d / name).read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["size"] == len(data), name
    assert manifest["files"] == src["files"]
    # the bytes log line
    assert any(re.search(r"MiB in all of a .* MiB checkpoint", ln) for ln in printed)

    # ranges are coalesced: one request per layer for the (adjacent) q/k/v/o block, one per norm,
    # plus 2 header requests per shard; every data request went to the pinned commit
    cdn_gets = [r for r in fake.requests if r["server"] == "cdn" and r["method"] == "GET"]
    assert len(cdn_gets) == 2 * len(SHARDS) + 2 * L
    resolves = [r["path"] for r in fake.requests if r["server"] == "hub" and "/resolve/" in r["path"]]
    assert resolves and all(f"/resolve/{SHA_A}/" in p for p in resolves)


def test_read_only_fetches_what_is_asked(fake, repos, tmp_path):
    d, arrays = repos[SHA_A]
    ckpt, src = hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)
    assert sorted(ckpt.keys()) == sorted(arrays)
    assert ckpt.config["model_type"] == "llama"
    assert ckpt.files() == list(SHARDS)
    before = src["bytes_fetched"]
    fake.reset()
    k = "model.layers.1.self_attn.k_proj.weight"
    [(key, arr, dt)] = list(ckpt.read([k]))
    assert key == k and dt == "float32" and arr.dtype == np.float32 and arr.flags.c_contiguous
    assert np.array_equal(arr, arrays[k])
    assert fake.repo_bytes_sent == arrays[k].nbytes == src["bytes_fetched"] - before
    with pytest.raises(CheckpointError, match="no tensor"):
        list(ckpt.read(["model.layers.9.self_attn.q_proj.weight"]))


def test_dropped_connection_resumes_mid_tensor(fake, repos, tmp_path):
    d, arrays = repos[SHA_A]
    lines: list[str] = []
    ckpt, src = hub.open_hf_checkpoint(REPO, "main", log=lines.append)
    fake.reset()
    # shard 1's first big body is layer 0's k/o/q/v block (48 KiB): cut it after 1000 bytes,
    # twice (so the resumed request is cut too), and fail shard 2's first request with a 503
    fake.drop_after(SHARDS[0], 1000, times=2)
    fake.fail_next(SHARDS[1], 503)
    from headgeom.io.store import extract

    out = tmp_path / "store"
    extract(ckpt, out, "tiny", src, log=lines.append)
    assert fake.faults_left() == 0
    need = wanted_keys(ckpt.config, ckpt.keys())
    manifest = assert_store_matches(out, arrays, need)
    assert manifest["source"]["commit_sha"] == SHA_A

    # the transfer resumed from the bytes it had: each retry asked for the rest of the range
    gets = [r for r in fake.requests if r["server"] == "cdn" and r["method"] == "GET" and r["sent"] > 1000 - 1]
    starts = [(int(m.group(1)), int(m.group(2))) for r in gets for m in [re.match(r"bytes=(\d+)-(\d+)", r["range"])]]
    first = [s for s in starts if s[1] == starts[0][1]]
    assert [s[0] - first[0][0] for s in first] == [0, 1000, 2000]
    assert [r["sent"] for r in gets[:3]] == [1000, 1000, first[0][1] - first[0][0] + 1 - 2000]
    assert sum(1 for ln in lines if "resuming from byte" in ln) == 3  # 2 drops + 1 HTTP 503
    # resuming re-sent no byte already received: the CDN sent exactly the tensors' bytes
    assert fake.sent_by_kind["cdn"] == sum(arrays[k].nbytes for k in need)


def test_branch_resolves_to_commit_and_reads_are_pinned(fake, repos, tmp_path):
    _, arrays_b = repos[SHA_B]
    out = tmp_path / "dev"
    fake.reset()
    m = fetch_model("tiny-dev", {"source": "hf", "repo_id": REPO, "revision": "dev"}, out, log=lambda s: None)
    assert m["source"]["revision"] == "dev" and m["source"]["commit_sha"] == SHA_B
    need = wanted_keys(json.loads((repos[SHA_B][0] / "config.json").read_text()), list(arrays_b))
    assert_store_matches(out, arrays_b, need)
    resolves = [r["path"] for r in fake.requests if "/resolve/" in r["path"]]
    assert resolves and all(f"/resolve/{SHA_B}/" in p for p in resolves)  # never the branch name

    # moving the branch afterwards does not change what an opened checkpoint reads
    ckpt, src = hub.open_hf_checkpoint(REPO, "dev", log=lambda s: None)
    fake.refs["dev"] = SHA_A
    k = "model.layers.0.self_attn.q_proj.weight"
    [(_, arr, _)] = list(ckpt.read([k]))
    assert src["commit_sha"] == SHA_B and np.array_equal(arr, arrays_b[k])

    # a commit sha is accepted as the revision; an unknown branch is a clear error
    _, src_a = hub.open_hf_checkpoint(REPO, SHA_A, log=lambda s: None)
    assert src_a["commit_sha"] == SHA_A
    with pytest.raises(CheckpointError, match="no-such-branch"):
        hub.open_hf_checkpoint(REPO, "no-such-branch", log=lambda s: None)


def test_offline_reads_a_populated_cache(fake, repos, env, tmp_path, monkeypatch):
    from huggingface_hub import constants, snapshot_download

    d, arrays = repos[SHA_A]
    snapshot_download(REPO, revision="main", allow_patterns=hub.ALLOW)  # HF_HOME/hub from the env fixture
    fake.close()  # from here on, nothing can be fetched
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    out = tmp_path / "offline"
    m = fetch_model("tiny", {"source": "hf", "repo_id": REPO, "revision": "main"}, out, log=lambda s: None)
    src = m["source"]
    assert src["commit_sha"] == SHA_A and src["revision"] == "main" and src["bytes_fetched"] == 0
    files = {f["name"]: f for f in src["files"]}
    assert set(files) == {"config.json", "model.safetensors.index.json", *SHARDS}
    for name, f in files.items():
        assert f["sha256"] == hashlib.sha256((d / name).read_bytes()).hexdigest()
    need = wanted_keys(json.loads((d / "config.json").read_text()), list(arrays))
    assert_store_matches(out, arrays, need)

    with pytest.raises(CheckpointError, match="HF_HUB_OFFLINE"):
        hub.open_hf_checkpoint("tiny-org/not-cached", "main", log=lambda s: None)

    # a corrupted cached blob is caught (blobs are named by their sha256)
    blob = (env / "hub" / "models--tiny-org--tiny-llama" / "snapshots" / SHA_A / SHARDS[1]).resolve()
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=SHARDS[1]):
        hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)


def test_token_is_sent_and_never_recorded(env, repos, tmp_path, monkeypatch):
    fake = serve(monkeypatch, repos, token=TOKEN)
    try:
        # without a token the private repo is refused, with an error that says so
        with pytest.raises(CheckpointError, match="Repository Not Found|401"):
            hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)

        monkeypatch.setenv("HF_TOKEN", TOKEN)
        fake.reset()
        out = tmp_path / "private"
        lines: list[str] = []
        m = fetch_model("tiny", {"source": "hf", "repo_id": REPO, "revision": "main"}, out, log=lines.append)
        assert m["source"]["commit_sha"] == SHA_A
        hub_reqs = [r for r in fake.requests if r["server"] == "hub" and r["path"] != "/api/agent-harnesses"]
        assert hub_reqs and all(r["auth"] == f"Bearer {TOKEN}" for r in hub_reqs), [r for r in hub_reqs if r["auth"] != f"Bearer {TOKEN}"]
        # the token stays on the hub: redirects to the CDN go without it
        cdn_reqs = [r for r in fake.requests if r["server"] == "cdn"]
        assert cdn_reqs and all(r["auth"] is None for r in cdn_reqs)
        for path in out.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path
        assert TOKEN not in (out / "manifest.json").read_text()
        assert lines and not any(TOKEN in ln for ln in lines)
        # a wrong token is refused, and the error does not echo it
        monkeypatch.setenv("HF_TOKEN", "hf_wrongWrongWrong")
        with pytest.raises(CheckpointError) as ei:
            hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)
        assert "hf_wrongWrongWrong" not in str(ei.value) and TOKEN not in str(ei.value)
    finally:
        fake.close()


def test_dtypes_decode_like_the_local_reader(env, tmp_path, monkeypatch):
    """Single-file repo (no index) with BF16/F16/F64/F32/I64 tensors: the hub reader yields the
    same arrays, dtypes and source dtype names as SafetensorsDir on the same files."""
    import torch
    from safetensors.torch import save_file

    d = tmp_path / "single"
    d.mkdir()
    g = torch.Generator().manual_seed(0)
    tensors = {
        "bf16": torch.randn(7, 5, generator=g).to(torch.bfloat16),
        "f16": torch.randn(3, 4, generator=g).to(torch.float16),
        "f64": torch.randn(6, generator=g).to(torch.float64),
        "f32": torch.randn(2, 3, 4, generator=g),
        "i64": torch.arange(-5, 5, dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 4),
    }
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text('{"model_type": "llama"}')
    sha = "c3" * 20
    fake = FakeHub("tiny-org/dtypes", {sha: d})
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        ckpt, src = hub.open_hf_checkpoint("tiny-org/dtypes", "main", log=lambda s: None)
        assert src["commit_sha"] == sha and ckpt.files() == ["model.safetensors"]
        local = {k: (a, dt) for k, a, dt in SafetensorsDir(d).read(sorted(tensors))}
        remote = {k: (a, dt) for k, a, dt in ckpt.read(sorted(tensors))}
        assert set(remote) == set(local) == set(tensors)
        for k, (a, dt) in local.items():
            b, dt2 = remote[k]
            assert dt2 == dt and b.dtype == a.dtype and b.shape == a.shape, k
            assert a.tobytes() == b.tobytes(), k  # bit-identical
        # BF16 widening is exact: re-rounding to bf16 gives the original bits back
        bf = remote["bf16"][0]
        assert bf.dtype == np.float32
        assert torch.equal(torch.from_numpy(bf).to(torch.bfloat16), tensors["bf16"])
    finally:
        fake.close()


def test_integrity_checks(fake, repos, tmp_path, monkeypatch):
    d, arrays = repos[SHA_A]
    k = "model.layers.0.self_attn.v_proj.weight"
    ckpt, _ = hub.open_hf_checkpoint(REPO, "main", log=lambda s: None, expected_sha256={k: sha256_bytes(arrays[k])})
    [(_, arr, _)] = list(ckpt.read([k]))
    assert np.array_equal(arr, arrays[k])
    ckpt, _ = hub.open_hf_checkpoint(REPO, "main", log=lambda s: None, expected_sha256={k: "0" * 64})
    with pytest.raises(IntegrityError, match="expected sha256"):
        list(ckpt.read([k]))

    # a shard header whose shape and byte span disagree is refused before any tensor is read
    bad = tmp_path / "bad"
    bad.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 60]}}).encode()
    (bad / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(60))
    (bad / "config.json").write_text('{"model_type": "llama"}')
    fake2 = FakeHub(REPO, {SHA_B: bad})
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", fake2.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake2.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        with pytest.raises(CheckpointError, match="64 bytes but spans 60"):
            hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)
    finally:
        fake2.close()


def test_server_ignoring_range_still_gives_the_right_bytes(fake, repos):
    d, arrays = repos[SHA_A]
    lines: list[str] = []
    ckpt, _ = hub.open_hf_checkpoint(REPO, "main", log=lines.append)
    fake.honour_range = False
    fake.drop_after(SHARDS[1], 300_000)  # and a drop past the tensor: resume skips to it again
    k = "model.layers.1.self_attn.o_proj.weight"
    [(_, arr, _)] = list(ckpt.read([k]))
    assert np.array_equal(arr, arrays[k])
    assert any("ignored a Range request" in ln for ln in lines)


def test_gives_up_after_retries(fake, monkeypatch):
    ckpt, _ = hub.open_hf_checkpoint(REPO, "main", log=lambda s: None)
    monkeypatch.setattr(hub_ranges, "MAX_RETRIES", 2)
    fake.fail_next(SHARDS[0], 503, times=10)
    with pytest.raises(CheckpointError, match="giving up after 2 retries"):
        list(ckpt.read(["model.layers.0.self_attn.q_proj.weight"]))
