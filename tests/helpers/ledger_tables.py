"""For the claims-ledger tests: a table's CSV as the pipeline writes it, one ledger entry judged
on the tables of a folder, and the fixed category of a "not computed" reason."""

from __future__ import annotations

import csv

from headgeom.publish.claims import NOT_COMPUTED_REASONS, build_rows


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


def reason_category(reason: str) -> str | None:
    """The fixed category (headgeom.publish.claims.NOT_COMPUTED_REASONS) a "not computed" reason
    belongs to, or None when it is outside the list."""
    text = str(reason or "").strip()
    if not text.startswith("not computed: "):
        return None
    text = text[len("not computed: "):]
    return next((c for c in NOT_COMPUTED_REASONS if text.startswith(c)), None)
