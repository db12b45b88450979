"""Faults and bad inputs: each test provokes one and checks the pipeline's answer.

* a malformed config stops the run before any job with one error naming the key;
* an unknown architecture is an error naming the supported ones;
* a truncated or corrupted safetensors file is detected: in the source checkpoint a clear
  error naming the file; in the tensor store the jobs reading it stop with the command that
  fetches it again, and that command repairs the run;
* NaN/Inf weights, zero heads and rank-deficient heads give NaN + a flag and the run goes on
  (Snakemake on a synthetic checkpoint);
* a job killed mid-write never shows a partial shard under the shard's name, and the rerun
  completes;
* a pickle-only checkpoint is refused and never unpickled (locally and on the hub);
* a full disk (a real tmpfs, when this machine allows a mount namespace) gives an error naming
  the file, and the files already there stay intact.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from headgeom.core.errors import CheckpointError, IntegrityError, UnknownArchitectureError
from headgeom.io.fetch import fetch_model
from headgeom.io.files import sha256_file
from headgeom.io.shards import read_shard
from headgeom.io.store import MANIFEST, TENSORS, TensorStore, verify_store
from synth import write_llama

D, DH = 48, 12  # synth.write_llama defaults: d_model, d_head (4 heads, 2 KV groups)
SLOW = pytest.mark.slow  # the tests that run Snakemake (make test-fast skips them)


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory) -> Path:
    """A PATH entry with an ``scontrol`` that fails at once: the SLURM executor plugin runs
    ``scontrol show config`` (10 s timeout) when Snakemake starts, which waits the full
    timeout on a machine with SLURM's tools but no controller. These runs use the local
    executor only."""
    d = tmp_path_factory.mktemp("stub-bin")
    (d / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    (d / "scontrol").chmod(0o755)
    return d


def _snake(snakemake_bin, root, workdir, *args, stub=None, env=None, timeout=300):
    cmd = [snakemake_bin, *args, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2",
           "--configfile", str(workdir / "cfg.yaml")]
    env = dict(os.environ if env is None else env)
    if stub is not None:
        env["PATH"] = os.pathsep.join([str(stub), env.get("PATH", "")])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


def _workdir(tmp_path: Path, ckpt: Path) -> Path:
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "models": {"tiny": {"source": "local", "path": str(ckpt)}}, "active_models": ["tiny"]}))
    return tmp_path


def _closure(workdir: Path, layer: int) -> dict:
    t, _ = read_shard(workdir / f"results/shards/paper1_heads/tiny/layer{layer}.parquet")
    return {r["head"]: r for r in t.to_pylist()}


# --------------------------------------------------------------------------- config


BAD_CONFIGS = {
    "wrong type, nested": ({"tables": {"strong_threshold": "high", "small_angle_deg": 10.0}}, "strong_threshold"),
    "unknown key": ({"rank_rtl": 1.0e-6}, "rank_rtl"),
    "active model not under models": ({"active_models": ["no-such-model"]}, "active_models"),
}
SCHEMA_CASES = ["wrong type, nested", "unknown key"]  # the ones Snakemake's validate() reports


@pytest.fixture(scope="module")
def bad_config_runs(snakemake_bin, root, stub_bin, tmp_path_factory) -> dict:
    """`snakemake -n` with each bad --configfile: (return code, output, workdir)."""
    runs = {}
    for case, (cfg, _) in BAD_CONFIGS.items():
        w = tmp_path_factory.mktemp("badcfg")
        (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        runs[case] = (*_snake(snakemake_bin, root, w, "-n", stub=stub_bin), w)
    return runs


@SLOW
@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_malformed_config_one_clear_error_naming_the_key(bad_config_runs, case):
    rc, out, w = bad_config_runs[case]
    key = BAD_CONFIGS[case][1]
    assert rc != 0, out
    lines = out.splitlines()
    # the workflow's load check (headgeom.commands.check.check) ahead of Snakemake's validate()
    one_line = [ln for ln in lines if ln.startswith("headgeom: ") and "found before any job ran" not in ln]
    if one_line:
        assert len(one_line) == 1 and key in one_line[0], out
    else:  # Snakemake's validate(): exactly one error, naming the key in its message or instance path
        assert out.count("Error validating config file") == 1 and out.count("ValidationError") == 1, out
        [line] = [ln for ln in lines if ln.startswith("ValidationError")]
        where = [ln for ln in lines if ln.startswith("On instance")]
        assert key in line or (where and f"['{key}']" in where[0]), out
    assert "Traceback" not in out and "Job stats" not in out and not (w / "results").exists(), out


@SLOW
@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_malformed_config_error_is_one_short_line(bad_config_runs, case):
    rc, out, _ = bad_config_runs[case]
    key = BAD_CONFIGS[case][1]
    assert rc != 0
    lines = out.strip().splitlines()
    assert len(lines) <= 12, out
    assert any(ln.startswith("headgeom: config") and key in ln for ln in lines), out


# --------------------------------------------------------------------------- architecture


def test_unknown_architecture_names_the_supported_ones(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_llama(ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "mamba_hybrid_xl"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnknownArchitectureError) as ei:
        fetch_model("tiny", {"source": "local", "path": str(ckpt)}, tmp_path / "store", log=lambda s: None)
    msg = str(ei.value)
    assert "mamba_hybrid_xl" in msg and "supported" in msg
    for arch in ("llama", "bert", "gemma3", "qwen2", "gpt2"):
        assert arch in msg, msg
    assert not (tmp_path / "store" / MANIFEST).exists()


# --------------------------------------------------------------------------- corrupt safetensors


SHARD1 = "model-00001-of-00002.safetensors"


@pytest.mark.parametrize("damage", ["truncated data", "truncated header", "garbage header", "empty"])
def test_corrupt_source_checkpoint_is_a_clear_error(tmp_path, damage):
    ckpt = tmp_path / "ckpt"
    write_llama(ckpt, shards=2)
    f = ckpt / SHARD1
    b = f.read_bytes()
    f.write_bytes({"truncated data": b[: len(b) - 1000], "truncated header": b[:20],
                   "garbage header": b[:8] + b"x" * 50 + b[58:], "empty": b""}[damage])
    out = tmp_path / "store"
    with pytest.raises(CheckpointError) as ei:
        fetch_model("tiny", {"source": "local", "path": str(ckpt)}, out, log=lambda s: None)
    assert str(f) in str(ei.value)
    assert "header" in str(ei.value) or "not fully covered" in str(ei.value)
    assert not (out / MANIFEST).exists() and not (out / TENSORS).exists()  # nothing half-made to consume


def _flip_tensor_byte(store: Path, key: str) -> None:
    """Flip one byte inside ``key``'s data in the store file (same size: only a hash sees it)."""
    import struct

    p = store / TENSORS
    data = bytearray(p.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    off = json.loads(bytes(data[8:8 + n]))[key]["data_offsets"]
    data[8 + n + off[0] + 5] ^= 0x40
    p.write_bytes(bytes(data))


@SLOW
def test_corrupt_store_is_named_at_load_and_refetched_before_any_job_reads_it(snakemake_bin, root, stub_bin, tmp_path):
    w = _workdir(tmp_path, tmp_path / "ckpt")
    write_llama(tmp_path / "ckpt", closed=((1, 3, -0.8),))
    target = "results/tables/p1_table2_strong_tail.csv"
    rc, out = _snake(snakemake_bin, root, w, target, stub=stub_bin)
    assert rc == 0, out[-3000:]
    store = w / "results/tensors/tiny"
    assert verify_store(store, full=True) == []
    before = _closure(w, 1)

    # a flipped byte in a layer-1 tensor: same size, readable header, only a hash sees it; the
    # workflow's load check hashes the store, names it in one line and fetches it again before
    # any job reads it, so no job fails and what came from it is recomputed from sound bytes
    _flip_tensor_byte(store, "model.layers.1.self_attn.v_proj.weight")
    assert verify_store(store, full=False) == [] and verify_store(store, full=True)
    rc, out = _snake(snakemake_bin, root, w, target, stub=stub_bin)
    assert rc == 0, out[-3000:]
    assert "results/tensors/tiny is damaged" in out and "does not match the manifest's store_sha256" in out, out[-3000:]
    assert "is corrupt" not in out  # no job read the damaged store
    assert verify_store(store, full=True) == []
    after = _closure(w, 1)
    assert np.isclose(after[3]["P"], 1.0)
    assert [after[h]["P"] for h in range(4)] == [before[h]["P"] for h in range(4)]

    # a truncated store is caught when it is opened, before any tensor is read
    p = store / TENSORS
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(IntegrityError, match="truncated or overwritten") as ei:
        TensorStore(store)
    assert "--forcerun" in str(ei.value)


# --------------------------------------------------------------------------- degenerate weights


@pytest.fixture(scope="module")
def degenerate(snakemake_bin, root, stub_bin, tmp_path_factory):
    """One run to the closure and PK tables on a checkpoint with a NaN head, an Inf head, a zero
    head, a rank-1 head and a zero value group."""
    from safetensors.numpy import load_file, save_file

    w = tmp_path_factory.mktemp("degenerate")
    ckpt = w / "ckpt"
    write_llama(ckpt, n_layers=3, closed=((0, 0, 1.5),))
    t = load_file(str(ckpt / "model.safetensors"))
    o = "model.layers.{}.self_attn.o_proj.weight".format
    t[o(0)][3, 1 * DH + 4] = np.nan  # layer 0 head 1: NaN in W_O
    t["model.layers.1.self_attn.q_proj.weight"][2 * DH + 1, 5] = np.inf  # layer 1 head 2: Inf in W_Q
    t[o(0)][:, 2 * DH:3 * DH] = 0  # layer 0 head 2: W_O = 0, so T = 0
    rng = np.random.default_rng(3)
    t[o(1)][:, 0:DH] = np.outer(rng.standard_normal(D), rng.standard_normal(DH))  # layer 1 head 0: rank 1
    t["model.layers.2.self_attn.v_proj.weight"][DH:2 * DH] = 0  # layer 2 KV group 1: V = 0 (heads 2, 3)
    save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    _workdir(w, ckpt)
    rc, out = _snake(snakemake_bin, root, w, "results/tables/p1_table2_strong_tail.csv", "results/tables/pk_table5_writing.csv", stub=stub_bin)
    return w, rc, out


@SLOW
def test_nonfinite_weights_give_nan_and_flag_and_the_run_continues(degenerate):
    w, rc, out = degenerate
    assert rc == 0, out[-3000:]  # the run went on to the tables
    assert "non-finite values" in (w / "logs/fetch/tiny.log").read_text()
    manifest = json.loads((w / "results/tensors/tiny/manifest.json").read_text())
    assert sorted(manifest["nonfinite_tensors"]) == ["model.layers.0.self_attn.o_proj.weight",
                                                     "model.layers.1.self_attn.q_proj.weight"]
    c0 = _closure(w, 0)
    assert np.isnan(c0[1]["P"]) and np.isnan(c0[1]["alpha"]) and c0[1]["flags"] == "nonfinite"
    assert np.isclose(c0[0]["P"], 1.0) and c0[0]["flags"] == ""  # its neighbours are unaffected
    pk0, prov0 = read_shard(w / "results/shards/pk_within/tiny/layer0.parquet")
    rows = [r for r in pk0.to_pylist() if r["kind"] == "O" and 1 in (r["head_i"], r["head_j"])]
    assert len(rows) == 3 and all(np.isnan(r["rho"]) and r["flags"] == "undefined" for r in rows)
    assert prov0["layer_facts"]["O"]["ranks"][1] == -1
    pk1, _ = read_shard(w / "results/shards/pk_within/tiny/layer1.parquet")
    q = [r for r in pk1.to_pylist() if r["kind"] == "Q"]
    assert all((np.isnan(r["rho"]) and r["flags"] == "undefined") == (2 in (r["head_i"], r["head_j"])) for r in q)
    assert all(np.isfinite(r["rho"]) for r in pk1.to_pylist() if r["kind"] == "O")  # Inf in Q leaves O alone
    row = next(csv.DictReader(open(w / "results/tables/p1_table2_strong_tail.csv")))
    assert int(row["heads"]) == 12 and int(row["undefined"]) == 4  # NaN head + zero head + 2 zero-V heads


@SLOW
def test_zero_and_rank_deficient_heads_give_nan_and_flag_and_the_run_continues(degenerate):
    w, rc, out = degenerate
    assert rc == 0, out[-3000:]
    c0, c1, c2 = _closure(w, 0), _closure(w, 1), _closure(w, 2)
    zero = c0[2]  # W_O = 0
    assert np.isnan(zero["P"]) and np.isnan(zero["alpha"]) and np.isnan(zero["g_T"])
    assert zero["flags"] == "zero_T" and zero["rank_O"] == 0
    for h in (2, 3):  # a zero V group: both its heads
        assert np.isnan(c2[h]["P"]) and c2[h]["flags"] == "zero_T" and c2[h]["rank_V"] == 0
    rank1 = c1[0]  # P is defined (a rank-1 T is exactly closed), principal coordinates are not
    assert rank1["flags"] == "rank_deficient" and rank1["rank_O"] == 1 and np.isclose(rank1["P"], 1.0)
    assert np.isnan(rank1["G_overlap"]) and np.isnan(rank1["identity_relerr"])
    pk0, _ = read_shard(w / "results/shards/pk_within/tiny/layer0.parquet")
    zrows = [r for r in pk0.to_pylist() if r["kind"] == "O" and 2 in (r["head_i"], r["head_j"])]
    assert zrows and all(np.isnan(r["rho"]) and r["flags"] == "undefined" for r in zrows)
    pk2, _ = read_shard(w / "results/shards/pk_within/tiny/layer2.parquet")
    [v] = [r for r in pk2.to_pylist() if r["kind"] == "V"]
    assert np.isnan(v["rho"]) and v["flags"] == "undefined" and v["dim_j"] == 0
    pkw = next(csv.DictReader(open(w / "results/tables/pk_table5_writing.csv")))
    assert int(pkw["layers"]) == 3


# --------------------------------------------------------------------------- killed mid-write


# Runs in every Python process of the workflow (PYTHONPATH): the first time a job writes the
# target shard (or a temporary file for it), the write stops halfway and the job SIGKILLs
# itself, as a node failure or the OOM killer would, recording whether anything was visible
# under the shard's name at that moment.
SITECUSTOMIZE = r'''
import os
_target, _marker = os.environ.get("HG_KILL_TARGET"), os.environ.get("HG_KILL_MARKER")
if _target and _marker and not os.path.exists(_marker):
    import json, signal
    import pyarrow.parquet as _pq
    _orig = _pq.write_table
    def write_table(table, where, *a, **k):
        final = os.path.join(os.path.dirname(str(where)), _target)
        name = os.path.basename(str(where))
        if (name == _target or name.startswith("." + _target + ".tmp-")) and not os.path.exists(_marker):
            _orig(table, where, *a, **k)
            size = os.path.getsize(where)
            os.truncate(where, size // 2)
            with open(_marker, "w") as fh:
                json.dump({"tmp": str(where), "final_existed": os.path.exists(final), "size": size}, fh)
            os.kill(os.getpid(), signal.SIGKILL)
        return _orig(table, where, *a, **k)
    _pq.write_table = write_table
    _Writer = _pq.ParquetWriter
    class ParquetWriter(_Writer):  # write_shard streams through a hashing sink (its file: sink.fh)
        def __init__(self, where, *a, **k):
            self._hg_where = str(getattr(getattr(where, "fh", None), "name", where))
            super().__init__(where, *a, **k)
        def close(self):
            super().close()
            where = self._hg_where
            final = os.path.join(os.path.dirname(where), _target)
            if os.path.basename(where).startswith("." + _target + ".tmp-") and not os.path.exists(_marker):
                size = os.path.getsize(where)
                os.truncate(where, size // 2)
                with open(_marker, "w") as fh:
                    json.dump({"tmp": where, "final_existed": os.path.exists(final), "size": size}, fh)
                os.kill(os.getpid(), signal.SIGKILL)
    _pq.ParquetWriter = ParquetWriter
'''


@SLOW
def test_job_killed_mid_write_leaves_no_partial_shard_and_rerun_completes(snakemake_bin, root, stub_bin, tmp_path):
    import pyarrow.parquet as pq

    w = _workdir(tmp_path, tmp_path / "ckpt")
    write_llama(tmp_path / "ckpt", closed=((1, 3, -0.8),))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "killed.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p),
           "HG_KILL_TARGET": "layer1.parquet", "HG_KILL_MARKER": str(marker)}
    shards = w / "results/shards/paper1_heads/tiny"
    target = "results/tables/p1_table2_strong_tail.csv"

    rc, out = _snake(snakemake_bin, root, w, target, stub=stub_bin, env=env)
    assert rc != 0 and marker.exists(), out[-3000:]  # the layer-1 job was killed while writing
    kill = json.loads(marker.read_text())
    assert kill["final_existed"] is False  # nothing was ever visible under the shard's name
    assert not (shards / "layer1.parquet").exists() and not (w / target).exists()
    partial = Path(kill["tmp"])
    assert partial.name.startswith(".layer1.parquet.tmp-")  # hidden; the rules never name it
    if partial.exists():
        with pytest.raises(Exception):
            pq.read_table(partial)  # it really is a torn file

    rc, out = _snake(snakemake_bin, root, w, target, stub=stub_bin, env=env)
    assert rc == 0, out[-3000:]
    assert not partial.exists()  # the rerun of the job removed the killed one's temporary file
    c1 = _closure(w, 1)
    assert len(c1) == 4 and np.isclose(c1[3]["P"], 1.0)
    prov = json.loads((w / "results/tables/p1_table2_strong_tail.prov.json").read_text())
    inputs = {Path(i["path"]).name: i["sha256"] for i in prov["inputs"]}
    assert inputs == {f"layer{l}.parquet": sha256_file(shards / f"layer{l}.parquet") for l in (0, 1)}
    row = next(csv.DictReader(open(w / target)))
    assert int(row["heads"]) == 8 and int(row["strong"]) == 1


# --------------------------------------------------------------------------- pickle


class _Payload:
    """Unpickling this creates a directory: evidence that something unpickled the file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_pickle_only_checkpoint_is_refused_and_never_unpickled(tmp_path, monkeypatch):
    # the payload works: unpickling it does create its marker
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(_Payload(control)))
    assert control.is_dir()

    marker = tmp_path / "UNPICKLED"
    ckpt = tmp_path / "ckpt"
    write_llama(ckpt)
    (ckpt / "model.safetensors").unlink()
    (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps({"model.layers.0.self_attn.q_proj.weight": _Payload(marker)}))

    def refuse(*a, **k):
        raise AssertionError("a checkpoint was unpickled")

    import torch

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)

    for path in (ckpt, ckpt / "pytorch_model.bin"):
        with pytest.raises(CheckpointError, match="pickle") as ei:
            fetch_model("tiny", {"source": "local", "path": str(path)}, tmp_path / "store", log=lambda s: None)
        assert "never unpickles" in str(ei.value)
    assert not marker.exists() and not (tmp_path / "store" / MANIFEST).exists()

    # the same repo on the (loopback) hub: refused from the file list, the .bin never requested
    from huggingface_hub import close_session, constants

    import headgeom.io.hub as hub
    from hubserver import FakeHub

    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    close_session()
    fake = FakeHub("org/pickled", {"c0" * 20: ckpt})
    monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        with pytest.raises(CheckpointError, match="pickle"):
            hub.open_hf_checkpoint("org/pickled", "main", log=lambda s: None)
        assert not any("pytorch_model.bin" in r["path"] for r in fake.requests)
    finally:
        fake.close()
        close_session()
    assert not marker.exists()


# --------------------------------------------------------------------------- full disk


FULL_DISK = r'''
import errno, json, os, resource, signal, subprocess, sys
from pathlib import Path
import numpy as np
d, ckpt_a, ckpt_b, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if mode == "tmpfs":
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], check=True)
from headgeom.io.fetch import fetch_model
from headgeom.io.files import sha256_file, write_json
from headgeom.io.shards import write_shard
from headgeom.io.store import TensorStore, verify_store

shard, js, store = d / "layer0.parquet", d / "table.json", d / "store"
write_shard(shard, {"x": np.arange(10.0)}, {"job": "good"})
write_json(js, {"good": True})
fetch_model("m", {"source": "local", "path": ckpt_a}, store, log=lambda s: None)
before = {p.name: sha256_file(p) for p in (shard, js, store / "manifest.json", store / "tensors.safetensors")}
if mode == "tmpfs":  # fill the disk
    with open(d / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError as e:
            assert e.errno == errno.ENOSPC
else:  # no mount namespace here: a file size limit makes every further write fail instead
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
out = {}
for name, write in (
    ("shard", lambda: write_shard(shard, {"x": np.random.default_rng(0).random(200_000)}, {"job": "new"})),
    ("json", lambda: write_json(js, {"big": "x" * 2_000_000})),
    ("store", lambda: fetch_model("m", {"source": "local", "path": ckpt_b}, store, log=lambda s: None)),
):
    try:
        write()
        out[name] = {"raised": None}
    except Exception as e:
        out[name] = {"raised": type(e).__name__, "errno": getattr(e, "errno", None), "msg": str(e)}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
out["after"] = {p.name: sha256_file(p) for p in (shard, js, store / "manifest.json", store / "tensors.safetensors")}
out["before"] = before
out["leftovers"] = sorted(p.name for p in list(d.iterdir()) + list(store.iterdir()) if ".tmp-" in p.name)
out["store_problems"] = verify_store(store, full=True)
out["store_reads"] = bool(np.isfinite(TensorStore(store).layer_factors(0).W_O).all())
print("RESULT " + json.dumps(out))
'''


def _mount_namespace() -> list[str] | None:
    for cmd in (["unshare", "--user", "--map-root-user", "--mount"], ["unshare", "--mount"]):
        try:
            if shutil.which("unshare") and subprocess.run(cmd + ["true"], capture_output=True, timeout=20).returncode == 0:
                return cmd
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def test_full_disk_gives_a_clear_error_and_loses_nothing(tmp_path):
    write_llama(tmp_path / "a", seed=1)
    write_llama(tmp_path / "b", seed=2, d_model=96, d_head=24)  # a bigger store than the old one
    disk = tmp_path / "disk"
    disk.mkdir()
    ns = _mount_namespace()
    mode = "tmpfs" if ns else "fsize"
    cmd = (ns or []) + [sys.executable, "-c", FULL_DISK, str(disk), str(tmp_path / "a"), str(tmp_path / "b"), mode]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(lines[0][len("RESULT "):])
    want_errno = 28 if mode == "tmpfs" else 27  # ENOSPC; EFBIG under the file size limit
    for name, fname in (("shard", "layer0.parquet"), ("json", "table.json"), ("store", TENSORS)):
        e = res[name]
        assert e["raised"] is not None and "OSError" in e["raised"] and e["errno"] == want_errno, (mode, name, e)
        assert f"could not write {disk}" in e["msg"] and fname in e["msg"], e  # names the file
    assert res["after"] == res["before"]  # every earlier file intact, the old store included
    assert res["leftovers"] == []  # no temporary files left to fill the disk further
    assert res["store_problems"] == [] and res["store_reads"]
