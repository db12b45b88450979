"""The activation stage's forward pass on a ``source: hf`` model, against the loopback hub
(tests/helpers/hubserver.py): a snapshot of the repo at the revision (weights and tokenizer)
comes into the HF cache and runs exactly as the same directory given as ``source: local``; the
commit the revision resolves to is recorded; the cache serves it offline; a revision the hub does
not have, an unreachable hub and an incomplete cache are the project's own errors."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from headgeom.core.errors import CheckpointError
from headgeom.io.forward import TOKENIZER_FILES, capture, open_model
from headgeom.io.texts import make_windows

from hubserver import FakeHub, isolate_hub_client
from synth_hf import TEXT, write_synthetic_llama

REPO = "tiny-org/synth-llama"
SHA_MODEL = "5e" * 20  # the model, on branch "exp"
SHA_MAIN = "3a" * 20  # main: a commit without the model
BRANCH = "exp"
NOT_LOADED = {"pytorch_model.bin": b"\x80\x04 not a pickle to load", "modeling_synth.py": b"raise SystemExit\n"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth-hf") / "ckpt"
    d.mkdir()
    write_synthetic_llama(d)
    return d


@pytest.fixture
def hub(model_dir, tmp_path, monkeypatch):
    """The synthetic model at SHA_MODEL (branch exp, beside a pickle and a code file that must
    never be fetched), main at another commit; a clean, online huggingface_hub client."""
    from huggingface_hub import close_session, constants

    files = {p.relative_to(model_dir).as_posix(): p.read_bytes() for p in model_dir.iterdir() if p.is_file()}
    assert any(n in files for n in TOKENIZER_FILES)
    home = tmp_path / "hf_home"
    isolate_hub_client(home, monkeypatch, retry_base_s=0.02)
    close_session()
    fake = FakeHub(REPO, {SHA_MODEL: {**files, **NOT_LOADED}, SHA_MAIN: {"README.md": b"no model here\n"}},
                   {"main": SHA_MAIN, BRANCH: SHA_MODEL})
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    try:
        yield fake, files, home
    finally:
        fake.close()
        close_session()


def _quiet(*_):
    pass


def _run(entry):
    with open_model("synth", entry, log=_quiet) as lm:
        ids, _ = make_windows(lm.tokenizer, TEXT, "t", 2, 16)
        return lm, ids, capture(lm, ids, keep_attn_out=True)


def _assert_same_capture(a, b):
    assert a.keys() == b.keys()
    for layer in a:
        assert a[layer].keys() == b[layer].keys() == {"z", "x", "attn_out"}
        for k in a[layer]:
            assert a[layer][k].dtype == b[layer][k].dtype and np.array_equal(a[layer][k], b[layer][k]), (layer, k)


def test_hf_model_runs_from_a_snapshot_like_the_local_directory(hub, model_dir, monkeypatch):
    fake, files, home = hub
    entry = {"source": "hf", "repo_id": REPO, "revision": BRANCH}
    lm, ids, acts = _run(entry)
    assert lm.tokenizer("The attention head", add_special_tokens=False)["input_ids"]
    assert ids.shape == (2, 16) and (ids > 1).sum() > 0
    src = lm.source
    assert src["type"] == "hf" and src["repo_id"] == REPO and src["revision"] == BRANCH
    assert src["commit_sha"] == SHA_MODEL
    recorded = {f["name"]: f["sha256"] for f in src["files"]}
    assert set(recorded) == set(files)  # config, weights, tokenizer, generation config: all of the model
    assert all(recorded[n] == hashlib.sha256(files[n]).hexdigest() for n in files)
    # neither the pickle nor the code file was asked for, let alone loaded
    asked = " ".join(r["path"] for r in fake.requests)
    assert "pytorch_model.bin" not in asked and "modeling_synth.py" not in asked
    snap = home / "hub" / "models--tiny-org--synth-llama" / "snapshots" / SHA_MODEL
    assert snap.is_dir() and not any((snap / n).exists() for n in NOT_LOADED)
    # the tokenizer's provenance is the files the snapshot holds
    assert lm.tokenizer_files and all(lm.tokenizer_files[n] == recorded[n] for n in lm.tokenizer_files)

    local, ids_local, acts_local = _run({"source": "local", "path": str(model_dir)})
    assert np.array_equal(ids, ids_local)
    assert lm.tokenizer_files == local.tokenizer_files
    _assert_same_capture(acts, acts_local)

    # offline, the cached snapshot serves the same model and records the same commit
    from huggingface_hub import close_session, constants

    fake.close()
    close_session()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    off, ids_off, acts_off = _run(entry)
    assert off.source["commit_sha"] == SHA_MODEL and off.source["revision"] == BRANCH
    assert off.source["files"] == src["files"]
    assert np.array_equal(ids_off, ids)
    _assert_same_capture(acts_off, acts)


def test_hf_revision_not_on_the_hub_is_a_clear_error(hub):
    with pytest.raises(CheckpointError, match=rf"{REPO}@no-such-branch.*no revision 'no-such-branch'"):
        with open_model("synth", {"source": "hf", "repo_id": REPO, "revision": "no-such-branch"}, log=_quiet):
            pass
    with pytest.raises(CheckpointError, match=rf"tiny-org/absent@{BRANCH}.*no repo"):
        with open_model("synth", {"source": "hf", "repo_id": "tiny-org/absent", "revision": BRANCH}, log=_quiet):
            pass
    with pytest.raises(CheckpointError, match=rf"{REPO}@main.*no config.json"):
        with open_model("synth", {"source": "hf", "repo_id": REPO, "revision": "main"}, log=_quiet):
            pass


def test_unreachable_hub_or_incomplete_cache_is_a_clear_error(hub, monkeypatch):
    from huggingface_hub import close_session, constants, snapshot_download

    import headgeom.io.hub as hubmod

    fake, _, _ = hub
    entry = {"source": "hf", "repo_id": REPO, "revision": BRANCH}
    # the weight fetch's files alone in the cache: offline, the forward pass lacks the tokenizer
    snapshot_download(REPO, revision=BRANCH, allow_patterns=hubmod.ALLOW)
    fake.close()
    close_session()  # the server is gone: no kept-alive connection to it either
    with pytest.raises(CheckpointError, match=rf"{REPO}@{BRANCH}.*(hub or the local HF cache)"):
        with open_model("synth", entry, log=_quiet):
            pass
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError, match=rf"{REPO}@{BRANCH}.*HF_HUB_OFFLINE"):
        with open_model("synth", entry, log=_quiet):
            pass
