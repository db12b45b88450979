"""The audit as a report object and its three views: ``audit()`` computes an AuditReport and
prints nothing; the short, full and JSON views render the same report (the JSON one parses back
to it, with stable keys), and a failure shows in all three and in the CLI's exit status."""

from __future__ import annotations

import json
import shutil

import pytest

# One place for the imports of the code under test (the package layout may move).
from headgeom.cli import main as cli
from headgeom.verify import audit as AUD
from headgeom.verify.audit.views import report_dict
from auditrun import SHARDS, TABLE, audit_results

ROW = {"model": "tiny"}
COLUMN = "wrong_v_median"  # a real number of the table (the strong-head columns are NaN here)
KEYS = {"number", "rows", "rule", "builder", "code", "config", "inputs", "verdicts", "integrity", "verdict",
        "verdict_text", "ok", "nan"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return audit_results(tmp_path_factory.mktemp("auditv"))


@pytest.fixture(scope="module")
def report(workdir):
    return AUD.audit(workdir, TABLE, ROW, COLUMN, tensors=True)


@pytest.fixture
def broken(workdir, tmp_path):
    """A copy of the run with its layer-1 shard deleted."""
    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    (w / SHARDS[1]).unlink()
    return w


def test_audit_computes_without_printing(workdir, capsys):
    lines = []
    rep = AUD.audit(workdir, TABLE, ROW, COLUMN, progress=lines.append)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert isinstance(rep, AUD.AuditReport) and rep.ok and not rep.integrity
    # progress: one line per shard recomputed from the tensors; the report lists the shards, not the lines
    assert rep.verdicts.recomputed == SHARDS
    assert len(lines) == 2 and all(p in line for p, line in zip(SHARDS, lines))
    assert not any(line in json.dumps(report_dict(rep)) for line in lines)


def test_json_view_round_trips_the_report(report):
    j = json.loads(AUD.render_json(report))
    assert set(j) == KEYS  # stable keys: a key added or dropped is a decision, made here
    assert set(j["inputs"]) == {"shards", "stores", "tensors", "manifests"}
    assert set(j["verdicts"]) == {"shards", "tensors", "recomputed"}
    assert set(j["verdicts"]["shards"]) == {"what", "value", "ok", "how", "verdict"}
    assert j == report_dict(report) and j["ok"] is True and j["integrity"] == []
    assert [s["path"] for s in j["inputs"]["shards"]] == SHARDS
    # the values are those the short view prints
    short = AUD.render_short(report)
    n = j["number"]
    assert short[0] == f"{n['table']} [model=tiny] {n['column']} = {n['value']}   ({n['csv']})"
    assert n["value"] == report.number.value and float(n["value"]) > 0
    for key, label in (("shards", "Recompute (a)"), ("tensors", "          (b)")):
        v = j["verdicts"][key]
        assert f"{label} {v['what']}: {v['value']} -> {v['verdict']} ({v['how']})" in short
        assert v["value"] == n["value"] and v["verdict"] == "MATCH"
    assert (f"Inputs: {len(j['inputs']['shards'])} shards sha256 OK (2 feed the row); 1 tensor store sha256 OK; "
            f"{len(j['inputs']['tensors'])} tensors sha256 OK") in "\n".join(short)
    assert f"Rule {j['rule']['name']}: {j['builder']['function']}" in short
    assert f"  rebuild: {j['rule']['rebuild']}" in short
    assert short[-2] == f"Verdict: {j['verdict_text']}" and j["verdict"] == "MATCH"


def test_full_view_renders_every_item_of_the_report(report, workdir):
    full = "\n".join(AUD.render_full(report))
    manifest = json.loads((workdir / "results/tensors/tiny/manifest.json").read_text())
    for s in report.inputs.shards:
        assert f"  {s.path}\n    rows {s.rows}, sha256 matches sidecar" in full
        assert f"    rebuild {s.rebuild}" in full
    assert len(report.inputs.tensors) == len({t.tensor for t in report.inputs.tensors}) > 0
    for t in report.inputs.tensors:
        assert f"    tensor   {t.tensor}  sha256 {manifest['tensors'][t.tensor]['sha256']}" in full
    for p in SHARDS:
        assert f"    recomputed {p}" in full
    assert full.endswith(f"Verdict: {report.verdict_text}")


def test_a_failing_audit_shows_in_every_view(broken):
    rep = AUD.audit(broken, TABLE, ROW, COLUMN, tensors=False)
    # a missing input is damage: the one screen says DAMAGED and names it (not MISMATCH)
    assert not rep.ok and rep.verdict == "DAMAGED"
    assert rep.verdict_text.startswith(f"DAMAGED — 1 input of this number fails its own checks (FAILED above): "
                                       f"{SHARDS[1]} (missing)")
    assert rep.integrity == [f"{SHARDS[1]} is missing"]
    assert [s.status for s in rep.inputs.shards] == ["ok", "missing"]
    short = AUD.render_short(rep)
    assert f"  FAILED {SHARDS[1]} is missing" in short
    assert short[short.index(f"  FAILED {SHARDS[1]} is missing") - 1].startswith(
        "Inputs: 2 shards checked, 1 FAILED (2 feed the row); 1 tensor store sha256 OK")
    assert short[-2].startswith("Verdict: DAMAGED — ")
    full = AUD.render_full(rep)
    assert f"    rows {rep.inputs.shards[1].rows}, MISSING" in full
    assert full[full.index("Integrity problems") + 1] == f"  {SHARDS[1]} is missing"
    j = json.loads(AUD.render_json(rep))
    assert j["ok"] is False and j["verdict"] == "DAMAGED" and j["integrity"] == rep.integrity
    assert [(s["path"], s["status"]) for s in j["inputs"]["shards"]] == [(SHARDS[0], "ok"), (SHARDS[1], "missing")]
    assert j["verdicts"]["shards"]["ok"] is False and j["verdicts"]["tensors"] is None


@pytest.mark.parametrize("view", [[], ["--full"], ["--json"]])
def test_cli_exit_status_and_view(broken, workdir, capsys, view):
    args = ["audit", TABLE, "--row", "model=tiny", "--column", COLUMN, "--no-tensors", *view]
    assert cli([*args, "-d", str(workdir)]) == 0
    good = capsys.readouterr().out
    assert cli([*args, "-d", str(broken)]) == 1
    bad = capsys.readouterr().out
    if view == ["--json"]:
        assert json.loads(good)["ok"] is True
        assert json.loads(bad)["integrity"] == [f"{SHARDS[1]} is missing"]
    else:
        assert "Verdict: MATCH" in good and "Verdict: DAMAGED" in bad and f"{SHARDS[1]} is missing" in bad
    assert cli(["audit", TABLE, "--row", "model=nope", "--column", COLUMN, "-d", str(workdir), *view]) == 2


def test_cli_progress_goes_to_stderr(workdir, capsys):
    assert cli(["audit", TABLE, "--row", "model=tiny", "--column", COLUMN, "--json", "-d", str(workdir)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["verdicts"]["tensors"]["verdict"] == "MATCH"  # stdout is the JSON alone
    assert [line.split(": ")[1].split()[0] for line in out.err.splitlines()] == SHARDS
    assert [line.split(":")[0] for line in out.err.splitlines()] == [
        f"shard {k} of {len(SHARDS)} recomputed from the tensors" for k in range(1, len(SHARDS) + 1)]


def test_a_recomputation_stopped_by_a_damaged_input_is_damaged_not_mismatch():
    """A shard that fails its own checks (here: a sound shard at another shard's path) stops the
    recomputation; the comparison line says DAMAGED, as the verdict does, never MISMATCH. Any
    other failure to recompute stays MISMATCH."""
    from headgeom.core.errors import DamagedFileError
    from headgeom.verify.audit.report import _recompute

    def misplaced():
        raise DamagedFileError("results/shards/pk_within/m/layer1.parquet is damaged: it is the shard of pk_within/m/layer0")

    def broken():
        raise KeyError("column")

    r = _recompute("0.5", "from the shards", misplaced, {}, "x", "t")
    assert (r.ok, r.verdict) == (False, "DAMAGED") and "layer0" in r.how
    r = _recompute("0.5", "from the shards", broken, {}, "x", "t")
    assert (r.ok, r.verdict) == (False, "MISMATCH")


def test_a_shard_that_fails_its_record_and_cannot_be_read_is_stated_damaged(workdir, tmp_path):
    """A shard whose bytes no longer match its content record is "damaged" in the audit, also where the broken
    bytes make it unreadable as Parquet (which byte breaks decides that, not the user): the status states the
    record check, the integrity list both findings."""
    w = tmp_path / "w"
    shutil.copytree(workdir / "results", w / "results")
    f = w / SHARDS[1]
    b = bytearray(f.read_bytes())
    b[len(b) // 8: len(b) // 2] = bytes(len(b) // 2 - len(b) // 8)  # its data pages zeroed, the size unchanged
    f.write_bytes(bytes(b))
    rep = AUD.audit(w, TABLE, ROW, COLUMN, tensors=False)
    check = next(c for c in rep.inputs.shards if c.path == SHARDS[1])
    assert check.damage and check.status.startswith("damaged ("), check.status
    assert any(x.startswith(f"{SHARDS[1]} is damaged") for x in rep.integrity)
    assert any(x.startswith(f"{SHARDS[1]}: unreadable") for x in rep.integrity), rep.integrity
    assert not rep.ok
