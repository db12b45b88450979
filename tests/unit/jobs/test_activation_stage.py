"""The activation stage end to end on a synthetic Llama checkpoint that transformers runs
(forward job -> natural-return and read-path jobs -> tables and figures), and its bad inputs:
corpora that are missing, empty, too short or not text; an architecture transformers cannot run;
CUDA asked for but absent."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from headgeom.core.errors import CorpusError, DamagedFileError, ModelRunError
from headgeom.outputs.paper1.activations import p1_activations_natural_return, p1_fig_activations_natural_return
from headgeom.outputs.pk import read_paths
from headgeom.io.forward import device_for, open_model
from headgeom.jobs.activation import forward_job, natural_return_job, read_layer, read_paths_job
from headgeom.schedule.families import FORWARD
from headgeom.io.texts import load_corpus, make_windows
from headgeom.io.fetch import fetch_model
from headgeom.io.files import write_recorded_json
from headgeom.io.shards import read_shards, write_shard
from headgeom.io.store import TensorStore
from headgeom.methods.closure import closure_layer

from synth_hf import ALPHA, TEXT, write_synthetic_llama


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    base = tmp_path_factory.mktemp("synth")
    ckpt = base / "ckpt"
    ckpt.mkdir()
    write_synthetic_llama(ckpt)
    (base / "text.txt").write_text(TEXT)
    entry = {"source": "local", "path": str(ckpt)}
    store = base / "store"
    fetch_model("synth", entry, store, log=lambda *_: None)
    return base, entry, store


def test_synthetic_end_to_end(synth, tmp_path):
    base, entry, store_dir = synth
    corpus = {"source": "local", "path": str(base / "text.txt")}
    params = {"n_windows": 3, "window": 24, "bos": True, "device": "cpu", "weight_rtol": 1e-6}
    act = tmp_path / "acts"
    summary = forward_job("synth", entry, store_dir, "toy", corpus, act, params, log=lambda *_: None, step=FORWARD.name)
    assert len(summary["windows"]["window_sha256"]) == 3
    arrays, meta = read_layer(act, 0)
    assert arrays["z"].shape == (72, 4, 8) and arrays["x"].shape == (72, 32)
    assert meta["norm_eps"] == pytest.approx(1e-5) and meta["corpus_record"]["source"] == "local"
    store = TensorStore(store_dir)
    nat, rp, clo = [], [], []
    for l in range(2):
        nat.append(tmp_path / f"nat{l}.parquet")
        natural_return_job(store_dir, act, l, nat[-1], {"endpoint": "pooled"}, log=lambda *_: None)
        rp.append(tmp_path / f"rp{l}.parquet")
        read_paths_job(store_dir, act, l, rp[-1], {"kinds": ["Q", "K", "V"]}, log=lambda *_: None)
        cols = closure_layer(store.layer_factors(l))
        clo.append(tmp_path / f"clo{l}.parquet")
        write_shard(clo[-1], {"model": np.array(["synth"] * 4, object), "layer": np.full(4, l), "head": cols["head"],
                              "P": cols["P"]}, {"job": "closure"})
    n, provs = read_shards(nat)
    # the planted closed head: alignment 1 and g_y = alpha on real forward-pass activations
    i = np.where((n["layer"] == 0) & (n["head"] == 0))[0][0]
    assert n["align"][i] == pytest.approx(1.0, abs=1e-9)
    assert n["g_y"][i] == pytest.approx(ALPHA, rel=1e-6)
    assert n["align_wrong_v"][i] < 0.99
    assert provs[0]["provenance"]["activations"]["windows"]["window_sha256"] == summary["windows"]["window_sha256"]
    r, _ = read_shards(rp)
    assert len(r["writer"]) == 4 * (4 + 2 + 2)  # writer layer 0 -> reader layer 1, Q heads + K, V groups
    assert np.allclose(r["e_tot"], r["e_lin"] + r["e_norm"] + 2 * r["e_cross"])
    assert ((r["share"] >= 0) & (r["share"] <= 1 + 1e-12)).all()
    out = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "tex", "prov")}
    c, _ = read_shards(clo)
    tables = {"p1_activations_natural_return": p1_activations_natural_return(n, c, ["synth"], **{"high_quantile": 0.75,
                                                                                        "low_quantile": 0.5}),
              "pk_sec5_4_read_paths": read_paths.pk_sec5_4_read_paths(r, ["synth"])}
    tables["p1_activations_natural_return"].write(out, [], {})
    assert "synth" in Path(out["csv"]).read_text()
    tables["pk_sec5_4_read_paths"].write(out, [], {})
    # every column and row key the claims ledger reads from these tables is in them
    from headgeom.publish.claims import load_ledger

    ledger = [e for e in load_ledger(Path(__file__).resolve().parents[3] / "config/claims.yaml")
              if e.get("table") in tables]
    assert len(ledger) > 40
    for e in ledger:
        keys = {col.key for col in tables[e["table"]].columns}
        wanted = set(e.get("values") or [e["column"]])
        wanted |= {k for row in (e.get("rows") or [e.get("row") or {}]) for k in row}
        assert wanted <= keys, (e["id"], wanted - keys)
    figs = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "prov")}
    from headgeom.outputs.formats import save

    for fig in (read_paths.pk_fig4_share_vs_rho(r, ["synth"]), read_paths.pk_fig5_spearman_layer_pairs(r, ["synth"]),
                p1_fig_activations_natural_return(n, c, ["synth"])):
        save(fig, figs, {"figure": "test"})
    assert Path(figs["png"]).stat().st_size > 1000
    # deterministic: a second forward pass writes identical activations
    act2 = tmp_path / "acts2"
    forward_job("synth", entry, store_dir, "toy", corpus, act2, params, log=lambda *_: None, step=FORWARD.name)
    assert np.array_equal(read_layer(act2, 1)[0]["x"], read_layer(act, 1)[0]["x"])


def test_forward_refuses_a_store_from_other_weights(synth, tmp_path):
    base, entry, store_dir = synth
    other = tmp_path / "other"
    other.mkdir()
    for f in base.joinpath("ckpt").iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    from safetensors.numpy import load_file, save_file

    t = load_file(str(other / "model.safetensors"))
    k = "model.layers.1.self_attn.v_proj.weight"
    t[k] = t[k] * 1.01
    save_file(t, str(other / "model.safetensors"), metadata={"format": "pt"})
    corpus = {"source": "local", "path": str(base / "text.txt")}
    params = {"n_windows": 1, "window": 8, "weight_rtol": 1e-6}
    with pytest.raises(ModelRunError, match="layer 1.*differ"):
        forward_job("synth", {"source": "local", "path": str(other)}, store_dir, "toy", corpus, tmp_path / "a", params,
                    log=lambda *_: None, step=FORWARD.name)


class _Tok:
    bos_token_id = 1

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [2 + (ord(c) % 50) for c in text]}


@pytest.mark.parametrize("content,match", [
    (None, "does not exist"), (b"", "is empty"), (b"  \n", "is empty"),
    (b"\x00\x01\x02binary", "not text"), (b"\xff\xfe\xfa", "not UTF-8"),
])
def test_bad_corpus_files_name_the_corpus(tmp_path, content, match):
    p = tmp_path / "c.txt"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(CorpusError, match=rf"corpus 'mine'.*{match}"):
        load_corpus("mine", {"source": "local", "path": str(p)})


def test_corpus_too_short_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(CorpusError, match=r"corpus 'short' is too short: 5 tokens"):
        make_windows(_Tok(), "abcde", "short", 2, 8)
    ids, rec = make_windows(_Tok(), "abcdefghijklmnop", "ok", 2, 8)
    assert ids.shape == (2, 8) and (ids[:, 0] == 1).all() and rec["corpus_tokens"] == 16
    assert ids[1, 1] == 2 + ord("h") % 50  # consecutive: window 2 starts after 7 text tokens
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["first doc", "second doc"], "n": [1, 2]}), p)
    text, rec = load_corpus("pq", {"source": "local", "path": str(p)})
    assert text == "first doc\n\nsecond doc" and rec["column"] == "text"
    with pytest.raises(CorpusError, match="corpus 'pq'.*not text"):
        load_corpus("pq", {"source": "local", "path": str(p), "column": "n"})
    bad = tmp_path / "b.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(CorpusError, match="corpus 'b'.*not a readable Parquet"):
        load_corpus("b", {"source": "local", "path": str(bad)})


def test_embedded_text_is_pinned():
    text, rec = load_corpus("eb", {"source": "embedded"})
    assert rec["file_sha256"] == "d73c37c56dd1c0e3390b4e4e13043e7498b55c42c1577c55a9ec03fa3038f72a"
    assert text.startswith("Shakespeare, William (1564--1616), English poet")
    assert "####" not in text and "p.772:0" not in text


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "made_up_arch", "hidden_size": 8}))
    from safetensors.numpy import save_file

    save_file({"w": np.zeros((2, 2), np.float32)}, str(d / "model.safetensors"))
    with pytest.raises(ModelRunError, match="'weird'.*(cannot|no hook map)"):
        with open_model("weird", {"source": "local", "path": str(d)}):
            pass


def test_cuda_absent_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ModelRunError, match="no CUDA device"):
        device_for("cuda")
    with pytest.raises(ModelRunError, match="cpu or cuda"):
        device_for("tpu")


def test_hf_corpus_through_loopback_hub(tmp_path, monkeypatch):
    """source: hf resolves the revision to its commit (recorded) and reads the pinned file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hubserver import FakeHub

    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": ["An encyclopedia article.", "Another paragraph of prose."]}), buf)
    data = buf.getvalue().to_pybytes()
    sha = "c3" * 20
    with FakeHub("tiny-org/tiny-text", {sha: {"data/validation.parquet": data, "README.md": b"x"}},
                 refs={"main": sha}, repo_type="dataset") as hubsrv:
        from huggingface_hub import close_session, constants

        home = tmp_path / "hf"
        monkeypatch.setenv("HF_HOME", str(home))
        for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        monkeypatch.setenv("HF_ENDPOINT", hubsrv.endpoint)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HOME", str(home))
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
        monkeypatch.setattr(constants, "ENDPOINT", hubsrv.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hubsrv.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        close_session()
        text, rec = load_corpus("wiki", {"source": "hf", "repo_id": "tiny-org/tiny-text", "revision": "main",
                                         "file": "data/validation.parquet"})
        assert text == "An encyclopedia article.\n\nAnother paragraph of prose."
        assert rec["commit"] == sha and rec["revision"] == "main"
        with pytest.raises(CorpusError, match="corpus 'gone'.*could not fetch"):
            load_corpus("gone", {"source": "hf", "repo_id": "tiny-org/tiny-text", "revision": "main", "file": "nope.txt"})
        close_session()


def test_gguf_loader_draws_no_progress_bar(capfd):
    """transformers' GGUF loader has its own tqdm bar (not governed by its disable_progress_bar);
    the forward job's load silences it, so a job log holds lines, not bar frames."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from headgeom.io.forward import _gguf_loader

    with _gguf_loader():
        list(gguf_utils.tqdm(range(50), desc="Converting and de-quantizing GGUF tensors..."))
    assert "Converting" not in capfd.readouterr().err
    list(gguf_utils.tqdm(range(50), desc="Converting and de-quantizing GGUF tensors..."))  # restored after
    assert "Converting" in capfd.readouterr().err


def test_gguf_reader_over_a_plain_view_reads_what_gguf_reads(tmp_path):
    """headgeom's GGUF reader parses over a plain ndarray view of the memory map (numpy.memmap's
    Python-level slicing is most of a large vocabulary's parse): every field's name, types, data
    indices and parts (dtype and bytes) and every tensor are those gguf.GGUFReader gives."""
    import gguf

    from headgeom.io.checkpoint import gguf_reader
    from synth import write_gguf_stub

    path = tmp_path / "m.gguf"
    write_gguf_stub(path, ["a", "bb", "ccc", "\u00e9t\u00e9"], **{"llama.context_length": 8})
    want, got = gguf.GGUFReader(str(path)), gguf_reader(path)
    assert isinstance(got, gguf.GGUFReader) and not isinstance(got.data, np.memmap)
    assert list(got.fields) == list(want.fields) and len(want.fields) > 4
    for name, f in want.fields.items():
        g = got.fields[name]
        assert (g.offset, g.data, g.types) == (f.offset, f.data, f.types)
        assert [(p.dtype, p.tobytes()) for p in g.parts] == [(p.dtype, p.tobytes()) for p in f.parts]
    assert [(t.name, t.tensor_type, t.data.tobytes()) for t in got.tensors] == \
        [(t.name, t.tensor_type, t.data.tobytes()) for t in want.tensors]
    assert got.fields["tokenizer.ggml.tokens"].contents() == ["a", "bb", "ccc", "\u00e9t\u00e9"]


def test_gguf_loader_converts_metadata_once_and_uses_the_callers_reader(tmp_path, monkeypatch):
    """Within the forward job's load, transformers' metadata-only calls of load_gguf_checkpoint
    (the config's and the tokenizer's) convert a file once, each caller getting its own copy (what
    one caller changes, the next does not see); a call with the tensors runs as usual; and a
    reader the caller passes serves its file (no parse of it here)."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from headgeom.io.checkpoint import GGUFFile
    from headgeom.io.forward import _gguf_loader
    from synth import write_gguf_stub

    path = tmp_path / "a.gguf"
    write_gguf_stub(path, ["a", "bb", "ccc"], **{"llama.context_length": 8})
    want = gguf_utils.load_gguf_checkpoint(str(path))
    held = GGUFFile(path)
    calls, parses = [], []
    real_load, real_reader = gguf_utils.load_gguf_checkpoint, gguf.GGUFReader

    def counting_load(p, return_tensors=False, *a, **k):
        calls.append(return_tensors)
        if return_tensors:  # the weights' call needs a model to load into: what it was given stands in
            return {"tensors": (p, k)}
        return real_load(p, return_tensors, *a, **k)

    class Counting(real_reader):
        def __init__(self, p, *a, **k):
            parses.append(str(p))
            super().__init__(p, *a, **k)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", counting_load)
    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    with _gguf_loader((path, held.reader)):
        first = gguf_utils.load_gguf_checkpoint(str(path))
        first["config"]["model_type"] = "changed"
        first["tokenizer"]["tokens"].append("zz")
        second = gguf_utils.load_gguf_checkpoint(str(path), return_tensors=False)
        tensors = [gguf_utils.load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=m) for m in (1, 2)]
    assert calls == [False, True, True] and parses == []
    assert second == want and second["config"]["model_type"] != "changed"
    assert [t["tensors"] for t in tensors] == [(str(path), {"model_to_load": m}) for m in (1, 2)]
    assert gguf_utils.load_gguf_checkpoint is counting_load  # the patch is undone


def test_gguf_loader_parses_each_file_once(tmp_path, monkeypatch):
    """transformers builds a GGUFReader for the config, the weights and the tokenizer; within the
    forward job's load one parse per file serves them all (the same fields), and outside it every
    call parses again (the patch is undone)."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from headgeom.io.forward import _gguf_loader
    from synth import write_gguf_stub

    def write(p, tokens):
        write_gguf_stub(p, tokens, **{"llama.context_length": 8})

    write(tmp_path / "a.gguf", ["a", "bb", "ccc"])
    write(tmp_path / "b.gguf", ["x", "yy"])
    parses = []
    real = gguf.GGUFReader

    class Counting(real):
        def __init__(self, path, *a, **k):
            parses.append(str(path))
            super().__init__(path, *a, **k)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    plain = [load_gguf_checkpoint(str(tmp_path / n)) for n in ("a.gguf", "a.gguf", "b.gguf")]
    assert len(parses) == 3
    parses.clear()
    with _gguf_loader():
        shared = [load_gguf_checkpoint(str(tmp_path / n)) for n in ("a.gguf", "a.gguf", "b.gguf")]
    assert parses == [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    assert shared == plain and plain[0] != plain[2]
    assert gguf.GGUFReader is Counting
    load_gguf_checkpoint(str(tmp_path / "a.gguf"))
    assert len(parses) == 3


def _same_bits(a, b) -> bool:
    return np.array_equal(a.view(np.int64), b.view(np.int64)) if a.dtype.kind == "f" else a.tolist() == b.tolist()


def _columns(path) -> dict:
    from headgeom.io.shards import read_shard

    t = read_shard(path)[0]
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def _forward(synth, act, bos=True):
    base, entry, store_dir = synth
    corpus = {"source": "local", "path": str(base / "text.txt")}
    forward_job("synth", entry, store_dir, "toy", corpus, act, {"n_windows": 2, "window": 16, "bos": bos,
                "device": "cpu", "weight_rtol": 1e-6}, log=lambda *_: None, step=FORWARD.name)


def test_reader_terms_are_kept_across_writer_jobs_inside_keep_reader_terms(synth, tmp_path, monkeypatch):
    """keep_reader_terms (what the choice sensitivity's recomputation runs in): what a reader layer
    alone gives (its weight-only terms, its norm statistics and per-token squared responses on the
    forward pass) is built once for every job of the same store and forward pass, and the shard is
    the same bit for bit; outside it each job builds its own."""
    from headgeom.jobs import activation as A
    from headgeom.methods import read_paths as RP

    _, _, store_dir = synth
    act = tmp_path / "acts"
    _forward(synth, act)
    built = []
    for name in ("reader_terms", "norm_stats", "reader_response_sq"):
        real = getattr(RP, name)
        monkeypatch.setattr(RP, name, lambda *a, _n=name, _f=real, **k: built.append(_n) or _f(*a, **k))
    p = {"kinds": ["Q", "K", "V"]}
    quiet = {"log": lambda *_: None}
    read_paths_job(store_dir, act, 0, tmp_path / "plain.parquet", p, **quiet)
    read_paths_job(store_dir, act, 0, tmp_path / "plain2.parquet", p, **quiet)
    once = ["norm_stats"] + ["reader_terms", "reader_response_sq"] * 3  # one reader layer, three kinds
    assert sorted(built) == sorted(once * 2)
    built.clear()
    with A.keep_reader_terms():
        read_paths_job(store_dir, act, 0, tmp_path / "kept.parquet", p, **quiet)
        read_paths_job(store_dir, act, 0, tmp_path / "kept2.parquet", p, **quiet)
        assert sorted(built) == sorted(once) and len(A._READER_TERMS) == 7
    assert A._READER_TERMS is None  # nothing is kept after the block
    ref = _columns(tmp_path / "plain.parquet")
    for name in ("kept", "kept2"):
        got = _columns(tmp_path / f"{name}.parquet")
        for c in ref:
            assert _same_bits(ref[c], got[c]), (name, c)


@pytest.mark.parametrize("switch", ["eps_exact", "acts"])
def test_columns_a_switch_cannot_change_are_taken_from_the_runs_shard_bit_for_bit(synth, tmp_path, switch):
    """Under a switch of kappa's epsilon (eps_exact) or of the forward pass (acts: BOS dropped), the
    read-path columns that COLUMN_READS says read neither are the run's own, bit for bit (so taking
    them from the run's shard is exact) and every other column moves; a recomputation inside
    reuse_columns takes them from the run's shard (a tampered e_lin shows in e_tot) and otherwise
    equals the full recomputation bit for bit, rows the run's shard lacks included."""
    import pyarrow.parquet as pq

    from headgeom.jobs import activation as A
    from headgeom.methods.read_paths import COLUMN_READS
    from headgeom.verify.sensitivity import unchanged_columns

    _, _, store_dir = synth
    quiet = {"log": lambda *_: None}
    act = tmp_path / "acts"
    _forward(synth, act)
    alt_act, alt = (act, {"eps_exact": False}) if switch == "eps_exact" else (tmp_path / "acts_nobos", {})
    if switch == "acts":
        _forward(synth, alt_act, bos=False)
    p = {"kinds": ["Q", "K", "V"]}
    run = tmp_path / "run.parquet"
    read_paths_job(store_dir, act, 0, run, p, **quiet)
    full = tmp_path / "full.parquet"
    read_paths_job(store_dir, alt_act, 0, full, {**p, **alt}, **quiet)
    keep = unchanged_columns(("activation_read_paths",), switch)
    assert set(keep) == {c for c, r in COLUMN_READS.items() if switch not in r}
    assert set(keep) == ({"rho", "composition", "share", "e_lin"} if switch == "eps_exact" else {"rho", "composition"})
    a, b = _columns(run), _columns(full)
    for c in COLUMN_READS:  # (a sign may well stay as it was)
        assert _same_bits(a[c], b[c]) == (c in keep) or c == "cross_sign", c
    out = tmp_path / "reused.parquet"

    def reused(base):
        """The recomputation inside reuse_columns with ``base`` as the run's shard: (columns, provenance note)."""
        with A.reuse_columns({out: (base, keep)}):
            read_paths_job(store_dir, alt_act, 0, out, {**p, **alt}, **quiet)
        return _columns(out), json.loads(pq.read_metadata(out).metadata[b"headgeom"])["columns_from_run"]

    # the same bits, the run's columns named in the provenance
    got, note = reused(run)
    assert all(_same_bits(b[c], got[c]) for c in b)
    assert sorted(note["columns"]) == sorted(keep) and note["blocks"] == note["of_blocks"] == 3
    # they are read, not recomputed: a tampered e_lin / rho in the run's shard comes through
    t = pq.read_table(run)
    c = "e_lin" if "e_lin" in keep else "rho"
    bad = tmp_path / "tampered.parquet"
    cols = {k: t.column(k).to_numpy(zero_copy_only=False) for k in t.column_names}
    write_shard(bad, {**cols, c: cols[c] + 1.0}, json.loads(t.schema.metadata[b"headgeom"]))  # with a record
    got, _ = reused(bad)
    assert np.allclose(got[c], b[c] + 1.0)
    if c == "e_lin":
        assert np.allclose(got["e_tot"], b["e_tot"] + 1.0)
    # but never from a shard that does not match its content record
    pq.write_table(t.set_column(t.schema.get_field_index(c), c, [t.column(c).to_numpy() + 1.0]), bad)
    with pytest.raises(DamagedFileError, match="tampered.parquet is damaged: has no content record"):
        reused(bad)
    # a run's shard with only the Q readers: the K and V rows are computed, the same bits
    part = tmp_path / "q_only.parquet"
    read_paths_job(store_dir, act, 0, part, {"kinds": ["Q"]}, **quiet)
    got, note = reused(part)
    assert all(_same_bits(b[c], got[c]) for c in b)
    assert note["blocks"] == 1 and note["of_blocks"] == 3


def test_the_first_windows_of_a_longer_pass_are_the_shorter_pass_byte_for_byte(synth, tmp_path):
    """windows_job: windows are cut consecutively and each runs alone, so the first 2 windows of a
    3-window pass are the 2-window pass: every layer file the same bytes (arrays and metadata),
    forward.json the same but for its timing and the pass it names (windows_of). What it refuses:
    more windows than the pass has, a shard whose token count disagrees with forward.json."""
    import hashlib

    from headgeom.jobs.activation import FORWARD_SUMMARY, layer_file, windows_job

    base, entry, store_dir = synth
    corpus = {"source": "local", "path": str(base / "text.txt")}
    p = {"window": 16, "bos": True, "device": "cpu", "weight_rtol": 1e-6}
    run = lambda n, out: forward_job("synth", entry, store_dir, "toy", corpus, out, {**p, "n_windows": n},  # noqa: E731
                                     log=lambda *_: None, step=FORWARD.name)
    long, direct, taken = tmp_path / "3x16", tmp_path / "2x16", tmp_path / "taken"
    run(3, long)
    run(2, direct)
    windows_job(long, taken, 2, log=lambda *_: None)
    ref, got = (json.loads((d / FORWARD_SUMMARY).read_text()) for d in (direct, taken))
    for l in range(2):
        a, b = layer_file(direct, l).read_bytes(), layer_file(taken, l).read_bytes()
        assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest(), l
    assert {k for k in set(ref) | set(got) if ref.get(k) != got.get(k)} == {"seconds", "windows_of", "record"}
    assert got["windows_of"]["dir"] == str(long) and got["windows"]["n_windows"] == 2
    # the taken pass reads as the direct one does
    arrays, meta = read_layer(taken, 1)
    assert arrays["x"].shape[0] == 32 == meta["n_tokens"]
    with pytest.raises(ModelRunError, match="has 3 windows: its first 4"):
        windows_job(long, tmp_path / "x", 4, log=lambda *_: None)
    bad = tmp_path / "bad"
    import shutil

    shutil.copytree(long, bad)
    s = json.loads((bad / FORWARD_SUMMARY).read_text())
    s["windows"]["n_windows"] = 4
    (bad / FORWARD_SUMMARY).write_text(json.dumps(s))  # edited by hand: its record refuses it
    with pytest.raises(DamagedFileError, match="forward.json: its content does not match its record"):
        windows_job(bad, tmp_path / "y", 2, log=lambda *_: None)
    # the same edit with its record rewritten: the token count still disagrees with the shards
    write_recorded_json(bad / FORWARD_SUMMARY, {k: v for k, v in s.items() if k not in ("record", "identity")},
                        s["identity"])
    with pytest.raises(ModelRunError, match="tokens, its forward.json says 4 x 16"):
        windows_job(bad, tmp_path / "y", 2, log=lambda *_: None)
    assert not (tmp_path / "y").exists()  # nothing half written
    with pytest.raises(ModelRunError, match="has no forward.json"):
        windows_job(tmp_path / "nowhere", tmp_path / "z", 1, log=lambda *_: None)


def test_a_forward_pass_takes_its_windows_from_the_longest_of_its_corpus_and_window_length():
    """forward_source: the largest window count of the same corpus and window length, when larger;
    another corpus or window length runs the model; the cost model prices the taking as a copy."""
    from headgeom.schedule.families import FORWARD, forward_shapes, forward_source

    cfg = {"activation": {"paper1": {"corpus": "a", "n_windows": 4, "window": 256},
                          "read_paths": {"corpus": "a", "n_windows": 8, "window": 256}}}
    assert forward_shapes(cfg) == [("a", 4, 256), ("a", 8, 256)]
    assert forward_source(cfg, "a", 4, 256) == 8 and forward_source(cfg, "a", "4", "256") == 8
    assert forward_source(cfg, "a", 8, 256) is None
    assert forward_source(cfg, "b", 4, 256) is None and forward_source(cfg, "a", 4, 128) is None
    other = {"activation": {"paper1": {"corpus": "a", "n_windows": 4, "window": 256},
                            "read_paths": {"corpus": "a", "n_windows": 8, "window": 128}}}
    assert forward_source(other, "a", 4, 256) is None
    f = {"n_layers": 30, "d_model": 576, "n_heads": 9, "n_kv_heads": 3, "d_head": 64}
    taken = FORWARD.cost(f, cfg, {"corpus": "a", "nwin": "4", "win": "256"})
    run = FORWARD.cost(f, other, {"corpus": "a", "nwin": "4", "win": "256"})
    assert taken["work_min"] < run["work_min"] / 50 and taken["mem_mb"] < run["mem_mb"]
