"""``headgeom audit --claim ID``: the audit of the number a ledger entry reads.

A ledger entry (config/claims.yaml) reads one column of one table, from one row or from several
that it reduces (a range over models, a sum, a median over rows). ``claim_cells`` resolves an
entry id to those cells, each named by row filters that select exactly that row (what
``headgeom audit TABLE --row ... --column ...`` takes); ``audit_claim`` prints the entry's
paper value, pipeline value and verdict, then audits every cell on one screen each."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from headgeom import layout
from headgeom.verify.audit import AuditError, cell_eq
from headgeom.verify.claims import (NO_ROW, NOT_BUILT, NOT_COMPARABLE, NOT_COMPUTED, NOT_RUN, _expand, _match,
                                    _Tables, build_rows, load_ledger, row_filters)

DEFAULT_LEDGER = Path(__file__).resolve().parents[2] / "config" / "claims.yaml"


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


def ledger_path(workdir: Path) -> Path:
    """The ledger the run's claims table was built from (its sidecar), else config/claims.yaml."""
    prov = Path(workdir) / layout.table_files("claims")["prov"]
    try:
        p = Path(json.loads(prov.read_text())["ledger"]["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_LEDGER
    p = p if p.is_absolute() else Path(workdir) / p
    return p if p.exists() else DEFAULT_LEDGER


@lru_cache(maxsize=4)
def _ledger_at(path: str, stamp: tuple) -> tuple:
    return tuple(load_ledger(path))


def ledger_entries(path) -> list[dict]:
    """The entries of the ledger at ``path``, read (and checked) once per file version in a process."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise AuditError(f"no ledger {path} ({e.strerror})") from None
    return list(_ledger_at(str(Path(path).resolve()), (st.st_mtime_ns, st.st_size)))


def run_models(workdir: Path) -> list[str]:
    """The models the run's claims table was judged for (its sidecar's params: the run's active
    models); [] when the run has no claims table (a model then counts as run where a table has its rows)."""
    prov = Path(workdir) / layout.table_files("claims")["prov"]
    try:
        models = json.loads(prov.read_text())["params"]["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [m for m in models if isinstance(m, str)] if isinstance(models, list) else []


# the ledger's verdicts under which an entry reads no cell of the run (headgeom.verify.claims)
NO_CELL = (NOT_RUN, NOT_COMPUTED, NOT_BUILT, NO_ROW, NOT_COMPARABLE)


def claim_row(tables_dir, claim_id: str, entry: dict, models_run: list[str]) -> dict:
    """The claims table's row of ``claim_id`` (headgeom.verify.claims.build_rows over its entry, with
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
    raise AuditError(f"no ledger entry {claim_id!r}" + (f" (e.g. {', '.join(near)})" if near else ""))


def unique_selector(columns: list[str], rows: list[dict], row: dict, start: dict) -> dict:
    """Row filters that select ``row`` alone (as headgeom audit matches them): the claim's own
    filter, then the table's leading columns added one by one until no other row matches."""
    sel = {k: str(v) for k, v in start.items() if k in columns}
    for c in [None, *columns]:
        if c is not None and c not in sel:
            sel[c] = row[c]
        if sum(all(cell_eq(r[k], v) for k, v in sel.items()) for r in rows) == 1:
            return sel
    raise AuditError(f"no set of columns tells this row apart from the others: {row}")


def claim_cells(tables_dir, claim_id: str, ledger: list[dict], cache: TableCache | None = None) -> ClaimCells:
    """The cells ledger entry ``claim_id`` reads from the tables in ``tables_dir``."""
    e, col = find_entry(ledger, claim_id)
    out = ClaimCells(claim_id, e, e.get("table"), col)
    if not out.table:
        return out
    t = (cache or TableCache(tables_dir)).get(out.table)
    if t is None:
        raise AuditError(f"{claim_id} reads {out.table}, which this run has not built "
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


def audit_claim(workdir, claim_id: str, *, ledger=None, out=print, directory: str = ".", **audit_kw) -> bool:
    """Print the entry and audit every cell it reads (one screen each, ``render_short``);
    True when every audit passes. AuditError, before any table is read for cells, when the
    ledger's verdict for the entry is one of NO_CELL (its models were not run, the pipeline does
    not compute it, its pooled row pools other models, ...; ``no_cell_reason``: the words of
    claims.csv), or when it reads no cell of this run: there is no number to audit.
    ``directory``: as the user named the work directory, for the printed commands."""
    from headgeom.verify.audit import audit, render_short

    tables = Path(workdir) / layout.TABLES_DIR
    entries = ledger_entries(ledger or ledger_path(workdir))
    entry, _ = find_entry(entries, claim_id)
    r = claim_row(tables, claim_id, entry, run_models(workdir))
    out(f"Claim {claim_id} ({r['paper']}, {r['where']}; {r['model']}): {r['quantity']}")
    out(f"  paper {r['paper_value']}   pipeline {r['pipeline']}   verdict: {r['status']}")
    why = no_cell_reason(r)  # the ledger's verdict first: no row of another model is ever audited
    if why:
        raise AuditError(f"{claim_id}: no cell of this run to audit ({why})")
    c = claim_cells(tables, claim_id, [entry])
    if not c.cells:
        raise AuditError(f"{claim_id}: no cell of this run to audit ({r['status']}; {r['note']})".replace("; )", ")"))
    how = c.entry.get("reduce", "one")
    out(f"  reads {c.table}.{c.column}: {len(c.cells)} cell(s)" + ("" if how == "one" else f", combined by {how}"))
    for cmd in c.commands(directory):
        out(f"    {cmd}")
    ok = True
    for i, sel in enumerate(c.cells, 1):
        out("")
        out(f"--- cell {i} of {len(c.cells)}")
        rep = audit(workdir, c.table, sel, c.column, **audit_kw)
        for line in render_short(rep):
            out(line)
        ok = rep.ok and ok
    return ok
