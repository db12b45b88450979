"""The code version handed from the Snakemake process to its jobs (headgeom.core.provenance): a job
takes it only while the checkout is what it was computed from; otherwise it computes its own."""

import json
import os

import pytest

from headgeom.core import provenance as P


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv(P.CODE_VERSION_ENV, raising=False)
    P.code_version.cache_clear()
    yield
    P.code_version.cache_clear()


@pytest.fixture
def checkout(tmp_path, monkeypatch, fresh):
    """A package directory of its own (two modules, a bytecode cache) beside a workflow/ directory."""
    pkg = tmp_path / "headgeom"
    (pkg / "core" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "core" / "m.py").write_text("y = 2\n")
    (pkg / "core" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "workflow" / "rules").mkdir(parents=True)
    (tmp_path / "workflow" / "rules" / "a.smk").write_text("rule a:\n")
    monkeypatch.setattr(P, "PKG_DIR", pkg)
    return tmp_path


def test_handed_down_version_equals_the_computed_one(fresh):
    computed = P._computed_code_version()
    P.hand_down_code_version()
    P.code_version.cache_clear()
    assert P.code_version() == computed
    assert json.loads(os.environ[P.CODE_VERSION_ENV])["version"] == computed


def test_a_job_takes_the_handed_down_version_while_the_stamp_holds(checkout, monkeypatch):
    fake = {"headgeom": "x", "source_sha256": "handed"}
    monkeypatch.setenv(P.CODE_VERSION_ENV, json.dumps({"stamp": P.code_stamp(), "version": fake}))
    assert P.code_version() == fake  # nothing recomputed: the value is the handed one


@pytest.mark.parametrize("change", ["touch module", "edit workflow", "new file", "remove module"])
def test_a_changed_checkout_makes_the_job_compute_its_own(checkout, monkeypatch, change):
    fake = {"headgeom": "x", "source_sha256": "handed"}
    monkeypatch.setenv(P.CODE_VERSION_ENV, json.dumps({"stamp": P.code_stamp(), "version": fake}))
    m = checkout / "headgeom" / "core" / "m.py"
    if change == "touch module":  # the same bytes, a later mtime
        st = m.stat()
        os.utime(m, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    elif change == "edit workflow":
        (checkout / "workflow" / "rules" / "a.smk").write_text("rule b:\n")
    elif change == "new file":
        (checkout / "headgeom" / "core" / "n.py").write_text("")
    else:
        m.unlink()
    assert P._handed_down(os.environ[P.CODE_VERSION_ENV]) is None
    assert P.code_version() == P._computed_code_version() != fake


def test_bytecode_caches_leave_the_stamp_alone(checkout):
    before = P.code_stamp()
    (checkout / "headgeom" / "core" / "__pycache__" / "n.cpython-311.pyc").write_bytes(b"\1")
    assert P.code_stamp() == before


@pytest.mark.parametrize("text", [None, "", "not json", '{"stamp": []}', '{"version": {}}', '[1, 2]',
                                  '{"stamp": [], "version": "a string"}'])
def test_malformed_or_stale_hand_down_is_ignored(text):
    assert P._handed_down(text) is None
