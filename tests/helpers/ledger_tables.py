"""For the claims-ledger tests: a table's CSV as the pipeline writes it, and one ledger entry judged
on the tables of a folder."""

from __future__ import annotations

import csv

from headgeom.verify.claims import build_rows


def write_table(folder, name: str, rows: list[dict]) -> None:
    """folder/<name>.csv with the rows' keys (in first-seen order) as its header."""
    with open(folder / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def judge(entry: dict, folder, models_run) -> dict[str, str]:
    """row id -> status of one ledger entry judged on folder's tables."""
    rows, _ = build_rows([entry], folder, models_run)
    return {r["id"]: r["status"] for r in rows}
