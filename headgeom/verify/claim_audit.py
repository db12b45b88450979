"""``headgeom audit --claim ID``: the audit of the number a ledger entry reads.

A ledger entry (config/claims.yaml) reads one column of one table, from one row or from several
that it reduces (a range over models, a sum, a median over rows); headgeom.publish.ledger_cells
names those cells. ``audit_claim`` prints the entry's paper value, pipeline value and verdict,
then audits every cell on one screen each."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from headgeom import layout
from headgeom.publish.claims import load_ledger
from headgeom.publish.ledger_cells import CellLookupError, claim_cells, claim_row, find_entry, no_cell_reason
from headgeom.verify.audit import AuditError

DEFAULT_LEDGER = Path(__file__).resolve().parents[2] / "config" / "claims.yaml"


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


def audit_claim(workdir, claim_id: str, *, ledger=None, out=print, directory: str = ".", **audit_kw) -> bool:
    """Print the entry and audit every cell it reads (one screen each, ``render_short``);
    True when every audit passes. AuditError, before any table is read for cells, when the
    ledger's verdict for the entry is one of ledger_cells.NO_CELL (its models were not run, the pipeline does
    not compute it, its pooled row pools other models, ...; ``no_cell_reason``: the words of
    claims.csv), or when it reads no cell of this run: there is no number to audit.
    ``directory``: as the user named the work directory, for the printed commands."""
    from headgeom.verify.audit import audit, render_short

    tables = Path(workdir) / layout.TABLES_DIR
    entries = ledger_entries(ledger or ledger_path(workdir))
    try:
        entry, _ = find_entry(entries, claim_id)
    except CellLookupError as e:
        raise AuditError(str(e)) from None
    r = claim_row(tables, claim_id, entry, run_models(workdir))
    out(f"Claim {claim_id} ({r['paper']}, {r['where']}; {r['model']}): {r['quantity']}")
    out(f"  paper {r['paper_value']}   pipeline {r['pipeline']}   verdict: {r['status']}")
    why = no_cell_reason(r)  # the ledger's verdict first: no row of another model is ever audited
    if why:
        raise AuditError(f"{claim_id}: no cell of this run to audit ({why})")
    try:
        c = claim_cells(tables, claim_id, [entry])
    except CellLookupError as e:
        raise AuditError(str(e)) from None
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
