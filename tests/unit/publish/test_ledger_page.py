"""The ledger page (results/tables/claims.html, headgeom.publish.ledger_page) in a real headless
Chromium: it loads (nothing from outside the file), a header filter narrows the rows, and a row's
link lands on the table row the claim reads. Skips only where Debian's chromium and
chromium-driver are not installed (.ci/run installs them)."""

from __future__ import annotations

import csv

import pytest

import browser
from headgeom.outputs.formats import Column, Table
from headgeom.publish.claims import build_rows, load_ledger
from headgeom.publish.ledger_page import ledger_page, ledger_rows

LEDGER = """
claims:
  pk:
    - {id: pk.a, where: Table 1, model: m1, table: t, row: {kind: O}, column: rho, value: "0.50"}
    - {id: pk.b, where: Table 1, model: m2, table: t, row: {kind: O}, column: rho, value: "0.70"}
    - {id: pk.c, where: Table 2, models: [m1, m2], table: t, row: {model: "{model}", kind: K}, column: rho,
       reduce: range, value: "0.2 – 0.4"}
  p1:
    - {id: p1.x, where: abstract, model: m2, value: 3, reason: "not computed: a setting of the study"}
    - {id: p1.y, where: Table 3, model: zz, table: t, column: rho, value: 1}
"""


def _tables(tmp_path):
    d = tmp_path / "results/tables"
    d.mkdir(parents=True)
    rows = [{"model": m, "kind": k, "rho": v} for m, k, v in
            [("m1", "O", 0.5), ("m1", "K", 0.2), ("m2", "O", 0.7), ("m2", "K", 0.4)]]
    t = Table("t", "a table", [Column("model", "Model"), Column("kind", "Kind"), Column("rho", "ρ")], rows)
    (d / "t.csv").write_text(t.csv())
    (d / "t.html").write_text(t.html())
    (tmp_path / "ledger.yaml").write_text(LEDGER)
    return d


def test_rows_link_the_table_row_they_read(tmp_path):
    d = _tables(tmp_path)
    ledger = load_ledger(tmp_path / "ledger.yaml")
    rows = {r["id"]: r for r in ledger_rows(ledger, build_rows(ledger, d, ["m1", "m2"])[0], d)}
    # the CSV row each claim reads, found here by reading the CSV
    with open(d / "t.csv", newline="") as fh:
        csv_rows = [(r["model"], r["kind"]) for r in csv.DictReader(fh)]
    assert rows["pk.a"]["href"] == f"t.html#row-{csv_rows.index(('m1', 'O'))}"
    assert rows["pk.b"]["href"] == f"t.html#row-{csv_rows.index(('m2', 'O'))}"
    assert rows["pk.c"]["href"] == f"t.html#row-{csv_rows.index(('m1', 'K'))}"
    assert rows["pk.a"]["audit"] == "headgeom audit --claim pk.a"
    assert "href" not in rows["p1.x"] and rows["p1.x"]["audit"] == ""
    assert rows["p1.y"]["href"] == "t.html" and rows["p1.y"]["status"] == "not run" and rows["p1.y"]["audit"] == ""
    assert 'id="row-3"' in (d / "t.html").read_text()


@pytest.fixture
def chromium():
    if not browser.available():
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    b = browser.Browser()
    yield b
    b.close()


def test_the_page_filters_and_links_in_chromium(tmp_path, chromium):
    d = _tables(tmp_path)
    ledger = load_ledger(tmp_path / "ledger.yaml")
    rows = build_rows(ledger, d, ["m1", "m2"])[0]
    page = d / "claims.html"
    page.write_text(ledger_page(ledger_rows(ledger, rows, d), "caption", "notes"))
    b = chromium
    b.get(page.as_uri())
    assert b.wait("return typeof ledger !== 'undefined' && ledger.getDataCount('active') === 5")
    # nothing loaded from outside the file
    assert b.js("return performance.getEntriesByType('resource').length") == 0
    # typing into the Model column's filter narrows the rows to those of that model
    b.type_into('.tabulator-col[tabulator-field="model"] input', "m2")
    want = sorted(r["id"] for r in rows if "m2" in r["model"])
    assert len(want) == 3
    got = b.wait("var r = ledger.getData('active').map(function (d) { return d.id; }).sort();"
                 f"return r.length === {len(want)} ? r : null")
    assert got == want
    assert b.js("return document.getElementById('shown').textContent") == str(len(want))
    # the link of pk.b lands on the row of model m2, kind O, whose rho the claim reads
    b.js("ledger.getRow('pk.b').getElement().querySelector('a.reads').click()")
    assert b.wait("return location.pathname.endsWith('/t.html') && document.querySelector(':target') !== null")
    cells = b.js("return Array.from(document.querySelector(':target').cells).map(function (c) { return c.textContent; })")
    assert cells == ["m2", "O", "0.7"]
