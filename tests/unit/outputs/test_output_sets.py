"""Tables and figures appear as a set or visibly incomplete (issue 11), and the audit says
NaN against NaN and empty tables explicitly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# One place for the imports of the code under test (the package layout may move).
from headgeom.verify import audit as AUD
from headgeom.outputs import formats as FIG
from headgeom.io import files as HIO
from headgeom.outputs.formats import Column, Table
from auditrun import audit_results, outs


def table(v) -> Table:
    return Table("t", "cap", [Column("a", "A")], [{"a": v}])


def test_table_sidecar_records_the_sha256_of_each_file(tmp_path):
    o = outs(tmp_path)
    table(1).write(o, [], {})
    prov = json.loads(Path(o["prov"]).read_text())
    assert set(prov["outputs"]) == {"csv", "md", "tex"}
    for k in ("csv", "md", "tex"):
        assert prov["outputs"][k] == {"name": Path(o[k]).name, "sha256": HIO.sha256_file(o[k])}
    assert HIO.set_problems(o["prov"]) == []


@pytest.mark.parametrize("killed_at", ["md", "tex", "prov"])
def test_a_kill_mid_set_never_leaves_a_new_file_beside_an_old_sidecar(tmp_path, monkeypatch, killed_at):
    """First a complete old set; then a rewrite killed while writing ``killed_at``. Afterwards
    either the sidecar is gone (incomplete) or it matches every file: never new CSV + old prov."""
    o = outs(tmp_path)
    table(1).write(o, [], {})
    real = HIO.atomic_path

    def dying(path, *a, **k):
        if str(path).endswith("." + killed_at) or (killed_at == "prov" and str(path).endswith(".prov.json")):
            raise KeyboardInterrupt("killed")
        return real(path, *a, **k)

    monkeypatch.setattr(HIO, "atomic_path", dying)
    with pytest.raises(KeyboardInterrupt):
        table(2).write(o, [], {})
    monkeypatch.setattr(HIO, "atomic_path", real)
    assert "2" in Path(o["csv"]).read_text()  # the new CSV was written
    probs = HIO.set_problems(o["prov"])
    assert probs and "missing" in probs[0]  # ... and the set says it is incomplete


def test_mismatched_sidecar_is_reported_incomplete(tmp_path):
    o = outs(tmp_path)
    table(1).write(o, [], {})
    Path(o["csv"]).write_text("a\n99\n")  # a CSV from another write beside this sidecar
    assert any("does not match" in p for p in HIO.set_problems(o["prov"]))


def test_figure_set_sidecar_written_last_with_hashes(tmp_path, monkeypatch):
    plt = FIG.pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    fo = {"png": str(tmp_path / "f.png"), "pdf": str(tmp_path / "f.pdf"), "prov": str(tmp_path / "f.prov.json")}
    FIG.save(fig, fo, {"figure": "f"})
    prov = json.loads(Path(fo["prov"]).read_text())
    assert set(prov["outputs"]) == {"png", "pdf"} and HIO.set_problems(fo["prov"]) == []
    real = HIO.atomic_path
    monkeypatch.setattr(HIO, "atomic_path",
                        lambda p, *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()) if str(p).endswith(".pdf") else real(p, *a, **k))
    with pytest.raises(KeyboardInterrupt):
        FIG.save(fig, fo, {"figure": "f"})
    plt.close(fig)
    assert not Path(fo["prov"]).exists()


# ------------------------------------------------------------------ audit: NaN, empty, incomplete


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A results/ tree built by the job functions (tests/helpers/auditrun.py)."""
    return audit_results(tmp_path_factory.mktemp("auditw"))


def test_audit_reports_nan_against_nan_explicitly(workdir):
    res = AUD.audit(workdir, "p1_table2_strong_tail", {"model": "tiny"}, "neg_alpha", find_rows=False)
    text = "\n".join(AUD.render_full(res))
    assert res.number.value == "nan" and res.nan is True
    assert "NaN = NaN" in text and "-> MATCH" not in text
    assert "Verdict: NaN" in text
    # a real number of the same table still says MATCH
    res = AUD.audit(workdir, "p1_table2_strong_tail", {"model": "tiny"}, "wrong_v_median", tensors=False)
    assert res.ok and not res.nan and "Verdict: MATCH" in "\n".join(AUD.render_full(res))


def test_audit_says_when_a_table_has_no_rows(workdir, tmp_path):
    import shutil

    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    csv = w / "results/tables/p1_table2_strong_tail.csv"
    csv.write_text(csv.read_text().splitlines()[0] + "\n")
    prov = json.loads((w / "results/tables/p1_table2_strong_tail.prov.json").read_text())
    prov["outputs"]["csv"]["sha256"] = HIO.sha256_file(csv)
    (w / "results/tables/p1_table2_strong_tail.prov.json").write_text(json.dumps(prov))
    with pytest.raises(AUD.AuditError, match="no rows"):
        AUD.audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "strong")


def test_audit_refuses_a_table_whose_files_are_not_its_sidecars_set(workdir, tmp_path):
    import shutil

    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    (w / "results/tables/p1_table2_strong_tail.md").write_text("other\n")
    with pytest.raises(AUD.AuditError, match="complete set"):
        AUD.audit(w, "p1_table2_strong_tail", {"model": "tiny"}, "strong")
