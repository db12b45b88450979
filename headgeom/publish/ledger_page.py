"""The claims ledger as one filterable page: results/tables/claims.html.

One row per ledger row (paper, section, model, quantity, paper value, pipeline value, verdict,
note), each linked to the row of the table it reads (``<table>.html#row-<i>``: every table page
gives its rows these anchors, headgeom.outputs.formats.html_page) and showing the
``headgeom audit --claim`` command that audits it. The interactive table is Tabulator, vendored
at a pinned version (headgeom/publish/vendor/tabulator/VERSION) and inlined: the page loads
nothing from anywhere."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from headgeom.io.files import write_text
from headgeom.outputs.formats import row_anchor
from headgeom.publish.claims import load_ledger
from headgeom.publish.ledger_cells import TableCache, claim_cells, no_cell_reason

VENDOR = Path(__file__).resolve().parent / "vendor" / "tabulator"

FIELDS = (  # (field, title, header filter)
    ("id", "Claim", "input"), ("paper", "Paper", "list"), ("where", "Section", "input"), ("model", "Model", "input"),
    ("quantity", "Quantity", "input"), ("paper_value", "Paper value", None), ("pipeline", "Pipeline value", None),
    ("status", "Verdict", "list"), ("read", "Reads", "input"), ("audit", "Audit", None), ("note", "Note", "input"),
)

_SCRIPT = """
var columns = FIELDS.map(function (f) {
  var c = {title: f[1], field: f[0], headerFilter: f[2] || false, headerFilterPlaceholder: "filter"};
  if (f[2] === "list") { c.headerFilterParams = {valuesLookup: true, clearable: true}; c.headerFilterFunc = "="; }
  if (f[0] === "read") {
    c.formatter = function (cell) {
      var d = cell.getRow().getData(), a = document.createElement("a");
      if (!d.href) { return cell.getValue(); }
      a.href = d.href; a.className = "reads"; a.textContent = cell.getValue(); return a;
    };
  }
  if (f[0] === "audit") { c.formatter = function (cell) { var v = cell.getValue(); return v ? "<code>" + v + "</code>" : ""; }; }
  if (f[0] === "note" || f[0] === "quantity") { c.formatter = "textarea"; c.width = 260; }
  return c;
});
var ledger = new Tabulator("#ledger", {data: DATA, columns: columns, layout: "fitDataTable", height: "80vh",
  index: "id", placeholder: "no claim matches the filters"});
ledger.on("dataFiltered", function (filters, rows) {
  document.getElementById("shown").textContent = rows.length;
});
"""


def ledger_rows(ledger: list[dict], rows: list[dict], tables_dir) -> list[dict]:
    """The page's rows: the claims table's rows, each with the link to the first table row it
    reads (``href``; the table page alone when the table has no row for the claim's models) and
    its audit command (none when there is no cell to audit, or the ledger's verdict says the entry
    reads none: not run, not computed, not comparable; ``headgeom audit --claim`` then exits 2)."""
    cache = TableCache(tables_dir)
    by_id = {e["id"]: e for e in ledger}
    out = []
    for r in rows:
        rec = {f: r.get(f, "") for f, *_ in FIELDS}
        rec["audit"] = ""
        entry = by_id.get(r["id"]) or by_id.get(r["id"].rsplit(".", 1)[0])
        if entry and entry.get("table") and cache.get(entry["table"]):
            cells = claim_cells(tables_dir, r["id"], ledger=[entry], cache=cache)
            rec["href"] = f"{cells.table}.html"  # the table, when the claim's models have no row there
            if cells.cells and not no_cell_reason(r):  # the audit audits nothing the ledger calls not run
                rec["href"] += f"#{row_anchor(cells.rows[0])}"
                rec["audit"] = f"headgeom audit --claim {r['id']}"
        out.append(rec)
    return out


def ledger_page(rows: list[dict], caption: str, notes: str = "") -> str:
    """The self-contained page (Tabulator's CSS and JS inlined, the rows as JSON)."""
    js = (VENDOR / "tabulator.min.js").read_text()
    css = (VENDOR / "tabulator.min.css").read_text()
    version = (VENDOR / "VERSION").read_text().splitlines()[0]
    data = json.dumps(rows, ensure_ascii=False).replace("</", "<\\/")
    fields = json.dumps([list(f) for f in FIELDS])
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>claims</title>\n'
        f"<style>{css}\nbody{{font-family:sans-serif;font-size:13px}} code{{font-size:12px}}</style>\n"
        f"<!-- {escape(version)} -->\n<script>{js}</script>\n</head><body>\n"
        f"<p><b>claims</b> — {escape(caption)} <span id=\"shown\">{len(rows)}</span> of {len(rows)} claims shown; "
        "filter by the boxes under the headers; <i>Reads</i> opens the table row the number is read from.</p>\n"
        '<div id="ledger"></div>\n'
        f"<p>{escape(notes)}</p>\n"
        f"<script>var DATA = {data};\nvar FIELDS = {fields};\n{_SCRIPT}</script>\n</body></html>\n"
    )


def write_ledger_page(path, ledger_path, t, tables_dir) -> None:
    """Rule ``claims``: the page of the claims table ``t`` (headgeom.publish.claims.claims_job over
    the ledger at ``ledger_path`` and the tables in ``tables_dir``), in place of the plain table page."""
    write_text(path, ledger_page(ledger_rows(load_ledger(ledger_path), t.rows, tables_dir), t.caption, t.notes))
