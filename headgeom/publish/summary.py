"""The end-of-run summary: per model the headline numbers of both papers, read from the tables
the run built, and where the tables, figures and report are (``results/summary.md``, printed on
the console when a run succeeds).

Which cells: the ``headlines`` (and ``headline_rows``) a table declares in its registration
(headgeom.outputs). Every number is a cell of one table's CSV, named beside it; a table the run did not build (its
stage off, or a model it does not cover) reads "not built". Nothing is recomputed here.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

from headgeom import layout
from headgeom.io.files import write_text
from headgeom.outputs import TABLES

def _read(tables_dir: Path, name: str) -> list[dict] | None:
    path = tables_dir / f"{name}.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _fmt(text: str) -> str:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return text if text else "–"
    if math.isnan(v):
        return "NaN"
    return f"{v:.4g}"


def _summarised():
    """The tables the summary reads, in registry order (their ``headlines`` / ``headline_rows``)."""
    return [o for o in TABLES.values() if o.headlines or o.headline_rows]


def model_headlines(tables_dir: Path, model: str) -> list[tuple[str, str, str]]:
    """(label, value, source ``table:column``) for one model; value "not built" where the run
    has no such table or no row for the model."""
    out = []
    for o in _summarised():
        rows = _read(tables_dir, o.name)
        row = next((r for r in rows or () if r.get("model") == model), None)
        for column, label in o.headlines:
            value = "not built" if row is None or column not in row else _fmt(row[column])
            out.append((label, value, f"{o.name}:{column}"))
        if o.headline_rows:
            for r in rows or ():
                if r.get("model") == model:
                    label, value = o.headline_rows(r)
                    out.append((label, value, f"{o.name}"))
    return out


def claims_line(tables_dir: Path) -> str | None:
    rows = _read(tables_dir, "claims")
    if rows is None:
        return None
    counts = Counter(r["status"] for r in rows)
    return f"{len(rows)} ledger entries: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def tables_read() -> list[str]:
    """Every table the summary reads (the workflow's inputs of the summary rule)."""
    return [o.name for o in _summarised()] + ["claims"]


def summary_markdown(root: Path, models: list[str]) -> str:
    """The summary of the run in work directory ``root`` for ``models``."""
    root = Path(root)
    tables = root / layout.TABLES_DIR
    lines = ["# headgeom run summary", ""]
    for model in models:
        lines += [f"## {model}", "", "| headline | value | from |", "|---|---|---|"]
        lines += [f"| {label} | {value} | `{src}` |" for label, value, src in model_headlines(tables, model)]
        lines.append("")
    claims = claims_line(tables)
    if claims:
        lines += ["## Claims ledger", "", claims + " (`results/tables/claims.csv`)", ""]
    # (no counts of files here: the summary is built beside tables that are still being written)
    lines += [
        "## Where things are", "",
        "* tables: `results/tables/<name>.{csv,md,tex,html,prov.json}`",
        "* figures: `figures/<name>.{png,pdf,prov.json}`",
        "* shards: `results/shards/<family>/<model>/`",
        "* report: `snakemake --report report.html` (every table and figure, captioned)",
        "* where a number came from: `headgeom audit <table> --row model=<model> --column <column>`",
        "",
    ]
    return "\n".join(lines)


def summary_job(md_path, models: list[str]) -> None:
    """Rule ``summary``: write ``summary_markdown`` to md_path (results/summary.md), for the run
    whose work directory holds it."""
    write_text(md_path, summary_markdown(Path(md_path).parents[1], list(models)))
