"""headgeom.api: its numbers are the pipeline's shards (the shared tiny run), and a model in
memory, a local safetensors folder, a GGUF file and a hub repo (the loopback hub) give the same
factors and tables; errors are HeadgeomErrors of one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import headgeom.api as hg
from headgeom.core.errors import CheckpointError, ConfigError, HeadgeomError, UnknownArchitectureError
from headgeom.io.shards import read_shard
from headgeom.io.store import TensorStore
from tablebits import assert_same_table

FACTORS = ("W_Q", "W_K", "W_V", "W_O", "norm_gain", "kv_group")


# --------------------------------------------------------------------------- helpers


def assert_same_factors(m1, m2):
    assert m1.n_layers == m2.n_layers
    for layer in range(m1.n_layers):
        f1, f2 = m1.factors(layer), m2.factors(layer)
        for name in FACTORS:
            a, b = getattr(f1, name), getattr(f2, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (layer, name)
        assert f1.norm_type == f2.norm_type


def assert_same_tables(m1, m2):
    assert_same_table(m1.closure(), m2.closure())
    assert_same_table(m1.sibling_pairs(), m2.sibling_pairs())
    assert_same_table(m1.pk_within(), m2.pk_within())
    assert_same_table(m1.pk_cross(), m2.pk_cross())


def _layer_no(path: Path) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", path.relative_to(path.parents[1]).as_posix()))


def shards(run: Path, family: str) -> tuple[pa.Table, list[dict]]:
    paths = sorted((run / "results" / "shards" / family / "tiny").rglob("*.parquet"), key=_layer_no)
    assert paths, family
    read = [read_shard(p) for p in paths]
    return pa.concat_tables([t for t, _ in read], promote_options="default"), [p for _, p in read]


def tiny_llama(dtype="float32", seed=0):
    """A 2-layer Llama (GQA 4 query / 2 KV heads) built by transformers from a config, seeded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=False)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for layer in m.model.layers:  # a norm gain that is not all ones, so the fold shows
            layer.input_layernorm.weight.copy_(1 + 0.1 * torch.randn(32))
    return m.to(getattr(torch, dtype)).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny Llama in memory and saved with save_pretrained (safetensors)."""
    model = tiny_llama()
    path = tmp_path_factory.mktemp("api") / "tiny-llama"
    model.save_pretrained(path, safe_serialization=True)
    return model, path


# --------------------------------------------------------------------------- the pipeline's shards


@pytest.mark.slow
def test_api_numbers_are_the_pipeline_shards(tmp_path_factory, snakemake_bin, root):
    """On the shared tiny run: every table equals its shard family bit for bit, in the same row
    order, with the params the pipeline passed the job; the factors equal the tensor store's."""
    from tinyrun import tiny_run

    run = tiny_run(tmp_path_factory, snakemake_bin, root)
    cfg = yaml.safe_load((run / "cfg.yaml").read_text())
    m = hg.load(cfg["models"]["tiny"]["path"], name="tiny", config=cfg)
    assert m.source["type"] == "local"

    store = TensorStore(run / "results" / "tensors" / "tiny")
    assert m.fields == store.fields
    for layer in range(m.n_layers):
        a, b = m.factors(layer), store.layer_factors(layer)
        for name in FACTORS:
            assert np.array_equal(getattr(a, name), getattr(b, name)), (layer, name)

    for family, job, table in [
        ("paper1_heads", "paper1_heads", m.closure()),
        ("paper1_pairs", "paper1_heads", m.sibling_pairs()),
        ("pk_within", "pk_within_layer", m.pk_within()),
        ("pk_self", "pk_within_layer", m.pk_self()),
        ("pk_cross", "pk_cross_layer", m.pk_cross()),
    ]:
        want, provs = shards(run, family)
        for prov in provs:  # the pipeline's params are the API's (pk_cross adds its pair list)
            assert {k: v for k, v in prov["params"].items() if k != "pairs"} == m.params(job), family
        assert table.num_rows > 0, family
        assert_same_table(table, want)

    # one layer, one writer -> reader pair: the matching rows of the full tables
    assert_same_table(m.closure(layers=1), want_rows(shards(run, "paper1_heads")[0], layer=1))
    cross = shards(run, "pk_cross")[0]
    assert_same_table(m.pk_cross(writer=0, reader=1), want_rows(cross, layer=0, layer_r=1))


def want_rows(table: pa.Table, **eq) -> pa.Table:
    import pyarrow.compute as pc

    mask = None
    for k, v in eq.items():
        e = pc.equal(table.column(k), v)
        mask = e if mask is None else pc.and_(mask, e)
    return table.filter(mask)


# --------------------------------------------------------------------------- sources agree


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_model_in_memory_equals_local_path(dtype, tmp_path):
    """A transformers model object and its save_pretrained folder give the same factors and
    tables bit for bit (bfloat16 widened to float32 the same way on both paths)."""
    model = tiny_llama(dtype)
    model.save_pretrained(tmp_path / "ckpt", safe_serialization=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    mem = hg.load(model, name="t")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    disk = hg.load(tmp_path / "ckpt", name="t")
    assert mem.source["type"] == "memory" and disk.source["type"] == "local"
    assert mem.fields == disk.fields
    assert (mem.fields.n_layers, mem.fields.n_heads, mem.fields.n_kv_heads, mem.fields.d_head) == (2, 4, 2, 8)
    assert_same_factors(mem, disk)
    assert_same_tables(mem, disk)
    # the in-memory model's tensors are copies: changing the model afterwards changes nothing
    import torch

    closure = mem.closure()
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight.mul_(2)
    assert_same_table(mem.closure(), closure)


def test_gguf_file_equals_the_pipeline_store(saved, tmp_path):
    """A GGUF file (llama.cpp layout: Q/K rows permuted) loads like `source: local` fetches it."""
    import gguf

    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.paper1 import heads_rows

    model, _ = saved
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    H, G, d, D = 4, 2, 8, 32

    def permute(W, n):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
        return W.reshape(n, 2, W.shape[0] // n // 2, *W.shape[1:]).swapaxes(1, 2).reshape(W.shape)

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(D)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_key_length(d)
    w.add_value_length(d)
    for layer in range(2):
        p, b = f"model.layers.{layer}.", f"blk.{layer}."
        w.add_tensor(b + "attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], H))
        w.add_tensor(b + "attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], G))
        w.add_tensor(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    m = hg.load(str(path))
    assert m.name == "tiny" and m.fields.adapter == "gguf-llama"
    fetch_model("tiny", {"source": "local", "path": str(path)}, tmp_path / "store", log=lambda s: None)
    store = TensorStore(tmp_path / "store")
    for layer in range(2):
        a, b = m.factors(layer), store.layer_factors(layer)
        for name in FACTORS:
            assert np.array_equal(getattr(a, name), getattr(b, name)), (layer, name)
        want = heads_rows(b, "tiny", layer, m.params("paper1_heads"))[0]
        assert_same_table(m.closure(layers=layer), pa.table({k: pa.array(v.tolist() if v.dtype == object else v)
                                                             for k, v in want.items()}))
    # and it is the same model as the safetensors original, up to the GGUF's float32 copy
    np.testing.assert_array_equal(m.factors(1).W_Q, hg.load(model).factors(1).W_Q)


def test_hub_repo_equals_local_path(saved, tmp_path, monkeypatch):
    """repo id + revision through the project's hub client (loopback hub) = the local folder;
    another revision gives that commit's weights, and the resolved commit is recorded."""
    from huggingface_hub import close_session, constants

    from hubserver import FakeHub, isolate_hub_client

    model, path = saved
    other = tmp_path / "other"
    tiny_llama(seed=1).save_pretrained(other, safe_serialization=True)
    sha_a, sha_b = "a1" * 20, "b2" * 20
    isolate_hub_client(tmp_path / "hf_home", monkeypatch, retry_base_s=0.02)
    close_session()
    fake = FakeHub("tiny-org/tiny-llama", {sha_a: path, sha_b: other}, {"main": sha_a, "dev": sha_b})
    try:
        monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
        monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        hub = hg.load("tiny-org/tiny-llama", revision="main", name="t")
        assert hub.source["type"] == "hf" and hub.source["commit_sha"] == sha_a
        assert hub.source["bytes_fetched"] < hub.source["bytes_total"]  # attention tensors only, by byte ranges
        local = hg.load(path, name="t")
        assert_same_factors(hub, local)
        assert_same_tables(hub, local)
        dev = hg.load("tiny-org/tiny-llama", revision="dev", name="t")
        assert dev.source["commit_sha"] == sha_b
        assert_same_factors(dev, hg.load(other, name="t"))
        assert not np.array_equal(dev.factors(0).W_O, hub.factors(0).W_O)
    finally:
        fake.close()
        close_session()


# --------------------------------------------------------------------------- params and errors


def test_config_reaches_the_job_params(saved):
    model, path = saved
    m = hg.load(path, config={"pk": {"kinds": ["O"]}, "paper1": {"scramble_draws": 3}})
    assert m.params("pk_within_layer")["kinds"] == ["O"]
    assert set(m.pk_within().column("kind").to_pylist()) == {"O"}
    assert all(len(x) == 3 for x in m.closure().column("P_scramble").to_pylist())
    default = hg.load(path)
    assert default.params("paper1_heads")["scramble_draws"] == 8 and default.name == "tiny-llama"
    df = default.closure(as_pandas=True) if _has_pandas() else None
    if df is not None:
        assert len(df) == 8 and list(df.columns) == default.closure().column_names


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


def test_errors_are_headgeom_errors_of_one_line(saved, tmp_path):
    model, path = saved
    # unsupported architecture: a folder, and a model object
    mamba = tmp_path / "mamba"
    mamba.mkdir()
    (mamba / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 8, "num_hidden_layers": 1}))
    from safetensors.numpy import save_file

    save_file({"backbone.layers.0.mixer.in_proj.weight": np.zeros((16, 8), np.float32)}, str(mamba / "model.safetensors"))
    with pytest.raises(UnknownArchitectureError) as e:
        hg.load(mamba)
    assert "'mamba' is not supported" in _one_line(e)

    from transformers import MambaConfig, MambaModel

    with pytest.raises(UnknownArchitectureError) as e:
        hg.load(MambaModel(MambaConfig(vocab_size=16, hidden_size=8, state_size=4, num_hidden_layers=1)))
    assert "not supported" in _one_line(e)

    # bad paths and inputs
    with pytest.raises(CheckpointError) as e:
        hg.load(tmp_path / "nowhere")
    assert "does not exist" in _one_line(e)
    with pytest.raises(CheckpointError) as e:
        hg.load(str(tmp_path / "nowhere" / "model.gguf"))
    assert "no such checkpoint" in _one_line(e)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError) as e:
        hg.load(tmp_path / "empty")
    assert "config.json" in _one_line(e)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((path / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not opened")
    with pytest.raises(CheckpointError) as e:
        hg.load(pickled)
    assert "never unpickles" in _one_line(e)
    with pytest.raises(HeadgeomError) as e:
        hg.load(42)
    _one_line(e)

    # bad settings and arguments
    with pytest.raises(ConfigError) as e:
        hg.load(path, config={"paper1": {"scramble_draw": 3}})
    assert "scramble_draw" in _one_line(e)
    m = hg.load(model)
    for call in (lambda: m.factors(2), lambda: m.closure(layers=[0, -1]), lambda: m.pk_cross(writer=1, reader=1),
                 lambda: m.params("no_such_job")):
        with pytest.raises(HeadgeomError) as e:
            call()
        _one_line(e)


def test_pq_roundtrip_keeps_the_api_types(saved, tmp_path):
    """What the API returns is what a shard holds: written and read back, the table is equal."""
    m = hg.load(saved[1])
    t = m.closure()
    pq.write_table(t, tmp_path / "x.parquet", compression="zstd")
    assert_same_table(t, pq.read_table(tmp_path / "x.parquet"))
