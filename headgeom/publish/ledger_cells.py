"""The cells a ledger entry reads (config/claims.yaml): ``claim_cells`` resolves an entry id to the
cells of one table column it reads, each named by row filters that select exactly that row (what
``headgeom audit TABLE --row ... --column ...`` takes). The ledger page links each claim to the
first of them (headgeom.publish.ledger_page); ``headgeom audit --claim`` audits every one
(headgeom.verify.claim_audit)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from headgeom.core.errors import HeadgeomError
from headgeom.publish.claims import (NO_ROW, NOT_BUILT, NOT_COMPARABLE, NOT_COMPUTED, NOT_RUN, _expand, _match, _Tables,
                                     build_rows, row_filters)


class CellLookupError(HeadgeomError):
    """A ledger entry's cells cannot be named: no such entry, its table is not built, or no set of
    columns tells its row apart (``headgeom audit --claim`` reports it as an AuditError)."""


def cell_eq(cell: str, want: str) -> bool:
    """A table cell equals a wanted value: the same text, or the same number (how ``headgeom audit``
    matches --row filters)."""
    if cell == want:
        return True
    try:
        return float(cell) == float(want)
    except ValueError:
        return False


@dataclass
class ClaimCells:
    id: str
    entry: dict
    table: str | None
    column: str
    cells: list[dict] = field(default_factory=list)  # one row selector per cell read
    rows: list[int] = field(default_factory=list)  # and that row's index in the table (0: the first data row)

    def commands(self, directory: str = ".") -> list[str]:
        d = [] if directory == "." else ["-d", directory]
        return [shlex.join(["headgeom", "audit", self.table, *d,
                            *[a for k, v in f.items() for a in ("--row", f"{k}={v}")], "--column", self.column])
                for f in self.cells]


# a run's tables, each CSV read once: name -> (columns, rows) or None
TableCache = _Tables


# the ledger's verdicts under which an entry reads no cell of the run (headgeom.publish.claims)
NO_CELL = (NOT_RUN, NOT_COMPUTED, NOT_BUILT, NO_ROW, NOT_COMPARABLE)


def claim_row(tables_dir, claim_id: str, entry: dict, models_run: list[str]) -> dict:
    """The claims table's row of ``claim_id`` (headgeom.publish.claims.build_rows over its entry, with
    the models the run's claims table was judged for): its verdict and note as claims.csv says them."""
    return next(x for x in build_rows([entry], tables_dir, models_run)[0] if x["id"] == claim_id)


def no_cell_reason(row: dict) -> str | None:
    """The claims table's words (verdict, then note) for a row that reads no cell of the run (not
    run, not computed, table not built, no row, not comparable); None when it reads some."""
    if row["status"].split(" (")[0] not in NO_CELL:
        return None
    return "; ".join(x for x in (row["status"], row.get("note", "")) if x)


def find_entry(ledger: list[dict], claim_id: str) -> tuple[dict, str]:
    """(entry, column) for a claim id as the claims table prints it ("pk.t1.124m.O", or
    "<entry id>.<column>" for an entry that claims several columns)."""
    for e in ledger:
        for col, *_ in _expand(e):
            if claim_id == e["id"] + (f".{col}" if "values" in e else ""):
                return e, col
    near = [e["id"] for e in ledger if claim_id.split(".")[0] in e["id"]][:5]
    raise CellLookupError(f"no ledger entry {claim_id!r}" + (f" (e.g. {', '.join(near)})" if near else ""))


def unique_selector(columns: list[str], rows: list[dict], row: dict, start: dict) -> dict:
    """Row filters that select ``row`` alone (as headgeom audit matches them): the claim's own
    filter, then the table's leading columns added one by one until no other row matches."""
    sel = {k: str(v) for k, v in start.items() if k in columns}
    for c in [None, *columns]:
        if c is not None and c not in sel:
            sel[c] = row[c]
        if sum(all(cell_eq(r[k], v) for k, v in sel.items()) for r in rows) == 1:
            return sel
    raise CellLookupError(f"no set of columns tells this row apart from the others: {row}")


def claim_cells(tables_dir, claim_id: str, ledger: list[dict], cache: TableCache | None = None) -> ClaimCells:
    """The cells ledger entry ``claim_id`` reads from the tables in ``tables_dir``."""
    e, col = find_entry(ledger, claim_id)
    out = ClaimCells(claim_id, e, e.get("table"), col)
    if not out.table:
        return out
    t = (cache or TableCache(tables_dir)).get(out.table)
    if t is None:
        raise CellLookupError(f"{claim_id} reads {out.table}, which this run has not built "
                         f"({Path(tables_dir) / (out.table + '.csv')} is missing)")
    cols, trows = t
    seen = {r.get("model") for r in trows} | {r.get("checkpoint") for r in trows}
    models = [e["model"]] if "model" in e else list(e["models"])
    for f in row_filters(e, cols, [m for m in models if m in seen]):
        hits = [i for i, r in enumerate(trows) if _match(r, f)]
        if len(hits) == 1 or (e.get("over_rows") and hits):
            out.cells += [unique_selector(cols, trows, trows[i], f) for i in hits]
            out.rows += hits
    return out
