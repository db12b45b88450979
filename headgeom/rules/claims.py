"""The claims ledger, the LaTeX macros (workflow/rules/claims.smk) and the run summary
(workflow/rules/summary.smk): which ledger, which tables each reads, their files."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from snakemake.io import report

from headgeom import layout, targets
from headgeom.io.files import within_workdir
from headgeom.publish.claims import ledger_tables, load_ledger
from headgeom.publish.summary import tables_read


def claims_ledger(workflow, config: dict) -> str:
    """The ledger file (``claims.ledger``, default config/claims.yaml), relative to the work
    directory where it lies inside it, so that a copied run directory (with the workflow in it)
    finds its jobs up to date and its provenance names no absolute path."""
    ledger = (config.get("claims") or {}).get("ledger")
    return within_workdir(Path(ledger) if ledger else Path(workflow.basedir) / "config" / "claims.yaml")


@lru_cache(maxsize=8)
def _tables_named(path: str, stamp: tuple) -> tuple[str, ...]:
    """The tables a ledger file names; read once per file version (claims.smk and sensitivity.smk
    both ask, and reading a ledger checks every entry)."""
    return tuple(ledger_tables(load_ledger(path)))


def judged_tables(config: dict, ledger: str) -> list[str]:
    """The tables the ledger's claims are judged on that this config builds."""
    built = targets.built_tables(config)
    st = os.stat(ledger)
    return [t for t in _tables_named(os.path.abspath(ledger), (st.st_mtime_ns, st.st_size)) if t in built]


def table_csvs(tables) -> list[str]:
    """The CSV file of each table."""
    return [layout.table_files(t)["csv"] for t in tables]


def cell_macros(config: dict) -> list[dict]:
    """The table cells ``claims.macros`` names (written as LaTeX macros beside the ledger's)."""
    return (config.get("claims") or {}).get("macros", [])


def claims_table_files(name: str, caption: str) -> dict:
    """The files of a table a claims rule writes itself, its HTML marked for ``snakemake --report``."""
    files = layout.table_files(name)
    return {
        "csv": files["csv"],
        "html": report(files["html"], caption=caption, category="Claims", subcategory="Tables",
                       labels={"name": name, "kind": "table"}),
        "md": files["md"],
        "tex": files["tex"],
        "prov": files["prov"],
    }


def summary_tables(config: dict) -> list[str]:
    """The tables the run summary reads (headgeom.publish.summary) that this config builds."""
    built = targets.built_tables(config)
    return [t for t in tables_read() if t in built or t == "claims"]
