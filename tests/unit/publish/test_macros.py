"""The ledger and named table cells as LaTeX macros (headgeom.publish.macros): names are TeX
control words, values at the paper's printed precision, the file carries code version and
config hash, and a document using them compiles (pdflatex when installed; .ci/run installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from headgeom.publish.claims import load_ledger
from headgeom.publish.macros import (
    MacroError,
    at_precision,
    cell_macros,
    claims_macros,
    config_hash,
    macro_name,
    pipeline_text,
)

LEDGER = """
claims:
  pk:
    - {id: pk.t1.124m.O, where: Table 1, model: m, table: t, column: rho, value: "0.059"}
    - {id: pk.t3.range, where: Table 3, models: [m, n], table: t, row: {model: "{model}"}, column: rho,
       reduce: range, value: "0.06 – 0.07"}
    - {id: pk.t3.frac, where: Table 3, model: m, table: t, column: frac, value: "3 / 4"}
  p1:
    - {id: p1.sci_2, where: Table 2, model: m, table: t, column: tiny, value: "1.04e-4"}
    - {id: p1.notrun, where: Table 2, model: z, table: t, column: rho, value: "50%"}
    - {id: p1.nocode, where: abstract, model: m, value: 0.336, reason: "not computed: a setting of the study"}
"""
TABLE = "model,rho,frac,tiny\nm,0.0612345,3/4,0.000104449\nn,0.07049,1/2,2e-5\n"


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "ledger.yaml").write_text(LEDGER)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables/t.csv").write_text(TABLE)
    return tmp_path / "ledger.yaml", tmp_path / "tables"


def _macros(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\\newcommand\{\\([A-Za-z]+)\}\{(.*?)\}", text, re.M))


def test_names_are_control_words_and_distinct():
    assert macro_name("pk.t1.124m.O") == "hgPkTOneOneTwoFourMO"
    assert macro_name("p1.sci_2") == "hgPOneSciTwo"
    assert re.fullmatch(r"[A-Za-z]+", macro_name("a-b.c_9/Z"))
    assert macro_name("pk.t3.124m.d") != macro_name("pk.t3.124m.D")  # two columns of one table


def test_the_shipped_ledger_has_one_name_per_macro(root):
    from headgeom.publish.claims import build_rows

    rows, _ = build_rows(load_ledger(root / "config/claims.yaml"), root / "no-tables", [])
    text = claims_macros(root / "config/claims.yaml", root / "no-tables", [], "x")  # raises on a repeated name
    assert len(_macros(text)) == 2 * len(rows)


def test_values_at_the_printed_precision():
    assert at_precision("0.059", 0.0612345) == "0.061"
    assert at_precision("338", 337.6) == "338"
    assert at_precision("1.04e-4", 1.04449e-4) == "1.04e-4"
    assert at_precision("6.130", 6.1304) == "6.130"
    assert pipeline_text("0.06 – 0.07", (0.0612345, 0.07049), "") == "0.06--0.07"
    assert pipeline_text("3 / 4", (3, 4), "3/4") == "3/4"
    assert pipeline_text("> 0", 0.1234, "0.1234") == "0.1234"  # a bound keeps the table's digits


def test_claims_macros_file(tmp_path):
    ledger, tables = _setup(tmp_path)
    text = claims_macros(ledger, tables, ["m", "n"], config_hash({"a": 1}))
    m = _macros(text)
    assert m["hgPkTOneOneTwoFourMO"] == "0.061" and m["hgPkTOneOneTwoFourMOVerdict"] == "differs"
    assert m["hgPkTThreeRange"] == "0.06--0.07" and m["hgPkTThreeRangeVerdict"] == "agrees"
    assert m["hgPkTThreeFrac"] == "3/4" and m["hgPOneSciTwo"] == "1.04e-4"
    assert m["hgPOneNotrun"] == "--" and m["hgPOneNotrunVerdict"] == "not run"
    assert m["hgPOneNocodeVerdict"] == "not computed by the pipeline"
    assert len(m) == 12
    assert f"% config sha256: {config_hash({'a': 1})}" in text and "% code: headgeom " in text


def test_cell_macros_and_their_errors(tmp_path):
    _, tables = _setup(tmp_path)
    spec = {"name": "hgRhoN", "table": "t", "row": {"model": "n"}, "column": "rho", "format": ".3f"}
    assert _macros(cell_macros([spec, {**spec, "name": "hgFracN", "column": "frac"}], tables, "x")) == {
        "hgRhoN": "0.070", "hgFracN": "1/2"}
    with pytest.raises(MacroError, match="not a TeX control word"):
        cell_macros([{**spec, "name": "hg2"}], tables, "x")
    with pytest.raises(MacroError, match="two macros named"):
        cell_macros([spec, spec], tables, "x")
    with pytest.raises(MacroError, match="2 rows of t match"):
        cell_macros([{**spec, "row": {}}], tables, "x")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex (apt-get install texlive-latex-base)")
def test_a_document_using_the_macros_compiles(tmp_path):
    ledger, tables = _setup(tmp_path)
    (tmp_path / "claims_macros.tex").write_text(claims_macros(ledger, tables, ["m", "n"], "abc"))
    spec = {"name": "hgRhoN", "table": "t", "row": {"model": "n"}, "column": "rho"}
    (tmp_path / "cell_macros.tex").write_text(cell_macros([spec], tables, "abc"))
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\n\\input{claims_macros.tex}\n\\input{cell_macros.tex}\n\\begin{document}\n"
        "Angle \\hgPkTOneOneTwoFourMO{} (\\hgPkTOneOneTwoFourMOVerdict), range \\hgPkTThreeRange, "
        "\\hgPOneSciTwo, \\hgPOneNotrun{} \\hgPOneNocodeVerdict, cell \\hgRhoN.\n"
        "\\typeout{VALUES:\\hgPkTOneOneTwoFourMO|\\hgPkTThreeRange|\\hgRhoN|\\hgPOneNocodeVerdict}\n\\end{document}\n")
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000
    # TeX expanded each macro to the value the file defines
    assert "VALUES:0.061|0.06--0.07|0.07049|not computed by the pipeline" in (tmp_path / "doc.log").read_text()


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex (apt-get install texlive-latex-base)")
def test_every_macro_of_the_shipped_ledger_typesets(root, tmp_path):
    text = claims_macros(root / "config/claims.yaml", tmp_path, [], "x")  # no tables: every entry "not run"
    (tmp_path / "claims_macros.tex").write_text(text)
    body = "\n".join(f"\\{n}\\par" for n in _macros(text))
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\input{claims_macros.tex}\n\\begin{document}\n"
                                      f"{body}\n\\end{{document}}\n")
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
