"""The code version handed from the Snakemake process to its jobs (headgeom.core.provenance): a job
takes it only while the checkout is what it was computed from; otherwise it computes its own."""

import json
import os
import time

import pytest

from headgeom.core import provenance as P


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv(P.CODE_VERSION_ENV, raising=False)
    P.code_version.cache_clear()
    yield
    P.code_version.cache_clear()


def test_handed_down_version_equals_the_computed_one(fresh, monkeypatch):
    computed = P._computed_code_version()
    P.hand_down_code_version()
    P.code_version.cache_clear()
    assert P.code_version() == computed
    assert json.loads(os.environ[P.CODE_VERSION_ENV])["version"] == computed


def test_a_job_takes_the_handed_down_version_while_the_stamp_holds(fresh, monkeypatch):
    fake = {"headgeom": "x", "source_sha256": "handed"}
    monkeypatch.setenv(P.CODE_VERSION_ENV, json.dumps({"stamp": P.code_stamp(), "version": fake}))
    assert P.code_version() == fake  # nothing recomputed: the value is the handed one


def test_a_changed_source_file_makes_the_job_compute_its_own(fresh, monkeypatch):
    fake = {"headgeom": "x", "source_sha256": "handed"}
    monkeypatch.setenv(P.CODE_VERSION_ENV, json.dumps({"stamp": P.code_stamp(), "version": fake}))
    target = P.PKG_DIR / "core" / "provenance.py"
    st = target.stat()
    try:  # the same bytes, a later mtime: the stamp no longer matches
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert P._handed_down(os.environ[P.CODE_VERSION_ENV]) is None
        assert P.code_version()["source_sha256"] == P._computed_code_version()["source_sha256"] != "handed"
    finally:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_new_file_in_the_package_changes_the_stamp(fresh, tmp_path):
    before = P.code_stamp()
    extra = P.PKG_DIR / f"_stamp_probe_{os.getpid()}_{time.time_ns()}.txt"
    try:
        extra.write_text("x")
        assert P.code_stamp() != before
    finally:
        extra.unlink()
    assert P.code_stamp() == before


@pytest.mark.parametrize("text", [None, "", "not json", '{"stamp": []}', '{"version": {}}', '[1, 2]',
                                  '{"stamp": [], "version": "a string"}'])
def test_malformed_or_stale_hand_down_is_ignored(text):
    assert P._handed_down(text) is None
