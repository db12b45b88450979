"""Reading what an audit starts from: the table's CSV, its provenance sidecar (checked), the
row asked for, Snakemake's record of the rule that wrote a file; and comparing a recomputed
value with the table's (equal, or within RTOL relative; NaN against NaN said as such)."""

from __future__ import annotations

import csv
import json
import math
from base64 import urlsafe_b64encode
from pathlib import Path

from headgeom import layout
from headgeom.io.checkpoint import contained
from headgeom.io.files import set_problems
from headgeom.publish.ledger_cells import cell_eq
from headgeom.schedule.families import family_of as registry_family_of

RTOL = 1e-12


class AuditError(Exception):
    """The number cannot be audited as asked (no such table, row or column, no sidecar)."""


def inside(root: Path, rel, what: str) -> Path:
    """``root / rel`` for a path from a sidecar that stays inside ``root``; AuditError if not."""

    return contained(root, rel, what, err=AuditError)


def model_name(m, where: str) -> str:
    """A model name from a provenance record: one path component (it names a store directory)."""
    if not isinstance(m, str) or not m or m in (".", "..") or "/" in m or "\\" in m or "\0" in m:
        raise AuditError(f"{where}: model name {m!r} is not a plain name (it would leave results/tensors/)")
    return m


def load_sidecar(prov_path: Path, workdir: Path) -> dict:
    """A table's provenance sidecar, checked: a JSON object whose ``inputs`` are records with a
    shard ``path`` under results/shards/ inside ``workdir`` (a path that leaves it is refused,
    never read or written), and whose recorded output sha256s (``outputs``) match the files
    beside it: a table whose files are not the set its sidecar describes is incomplete."""
    try:
        sidecar = json.loads(prov_path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise AuditError(f"{prov_path} is not a readable provenance sidecar ({type(e).__name__}: {e})") from e
    if not isinstance(sidecar, dict):
        raise AuditError(f"{prov_path}: a provenance sidecar must be a JSON object")
    inputs = sidecar.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(r, dict) and isinstance(r.get("path"), str) for r in inputs):
        raise AuditError(f"{prov_path}: 'inputs' must be a list of records with a 'path'")
    for rec in inputs:
        rel = inside(workdir, rec["path"], f"{prov_path.name}: input").relative_to(workdir)
        shard_family(str(rel))
        if not isinstance(rec.get("provenance", {}), dict):
            raise AuditError(f"{prov_path}: input {rec['path']}: 'provenance' must be an object")

    problems = set_problems(prov_path, sidecar)
    if problems:
        raise AuditError(f"{prov_path.name}: the table's files are not one complete set (interrupted write?): "
                         + "; ".join(problems) + ". Rebuild the table.")
    return sidecar


# ------------------------------------------------------------------ reading tables


def table_paths(workdir: Path, table: str) -> tuple[str, Path, Path]:
    """TABLE may be a name (p1_table2_strong_tail) or a path to its CSV; returns (name, csv, sidecar)."""
    p = Path(table)
    if p.suffix == ".csv" or "/" in table:
        csv_path = p if p.is_absolute() else workdir / p
        name = csv_path.name.removesuffix(".csv")
    else:
        name = table
        csv_path = workdir / layout.table_files(name)["csv"]
    prov = csv_path.with_name(f"{name}.prov.json")
    if not csv_path.exists():
        known = sorted(x.stem for x in (workdir / layout.TABLES_DIR).glob("*.csv"))
        raise AuditError(f"no table {csv_path} (tables here: {', '.join(known) or 'none'})")
    if not prov.exists():
        raise AuditError(f"{csv_path} has no provenance sidecar {prov.name}")
    return name, csv_path, prov


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


def parse_row_filters(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise AuditError(f"--row takes KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def select_row(columns: list[str], rows: list[dict], filters: dict[str, str], where: str = "") -> int:
    for k in filters:
        if k not in columns:
            raise AuditError(f"{where}: no column {k!r} to select rows by (columns: {', '.join(columns)})")
    if not rows:
        raise AuditError(f"{where}: the table has no rows (empty), so there is no number to audit")
    hits = [i for i, r in enumerate(rows) if all(cell_eq(r[k], v) for k, v in filters.items())]
    if len(hits) != 1:
        show = "\n".join("  " + ", ".join(f"{k}={r[k]}" for k in columns[:3]) for r in rows[:20])
        what = "no row" if not hits else f"{len(hits)} rows"
        raise AuditError(f"{where}: {what} with {filters}; add --row KEY=VALUE until one row is left. Rows:\n{show}")
    return hits[0]


NAN_BOTH = "NaN in the table and NaN recomputed: an undefined value, reproduced as undefined (no number compared)"


DAMAGED_INPUT = "could not recompute: an input is damaged"


def verdict_word(ok: bool, how: str) -> str:
    """The word printed for one comparison: NaN against NaN is said as such, never MATCH; a
    recomputation stopped by a damaged input is DAMAGED (nothing was compared)."""
    if ok and how == NAN_BOTH:
        return "NaN = NaN"
    if how.startswith(DAMAGED_INPUT):
        return "DAMAGED"
    return "MATCH" if ok else "MISMATCH"


def compare(table_value: str, recomputed: str) -> tuple[bool, str]:
    """(match, how): equal strings, or numbers within RTOL relative (inf = inf). NaN against
    NaN is (True, NAN_BOTH), which the audit reports as such, not as a match of numbers."""
    if table_value.strip().lower() in ("nan", "-nan") and recomputed.strip().lower() in ("nan", "-nan"):
        return True, NAN_BOTH
    if table_value == recomputed:
        return True, "exact"
    try:
        a, b = float(table_value), float(recomputed)
    except ValueError:
        return False, f"differs: table {table_value!r}, recomputed {recomputed!r}"
    if math.isnan(a) and math.isnan(b):
        return True, NAN_BOTH
    if a == b:
        return True, "exact"
    if math.isfinite(a) and math.isfinite(b):
        rel = abs(a - b) / max(abs(a), abs(b))
        if rel <= RTOL:
            return True, f"within {RTOL:g} relative ({rel:.1e})"
        return False, f"differs: table {table_value}, recomputed {recomputed} (relative difference {rel:.3e})"
    return False, f"differs: table {table_value}, recomputed {recomputed}"


# ------------------------------------------------------------------ snakemake metadata


def rule_of(workdir: Path, path: str) -> str | None:
    """The rule Snakemake recorded for an output (.snakemake/metadata), if any."""
    b64 = urlsafe_b64encode(path.encode()).decode()
    parts = [b64[i: i + 254] for i in range(0, len(b64), 254)]
    rec = workdir / ".snakemake" / "metadata" / Path(*(["@" + s for s in parts[:-1]] + [parts[-1]]))
    try:
        return json.loads(rec.read_text()).get("rule")
    except (OSError, ValueError):
        return None


def table_rule(workdir: Path, name: str, csv_rel: str) -> str:
    return rule_of(workdir, csv_rel) or f"table_{name}"


def shard_family(path: str) -> str:
    """The name of a path's shard family (headgeom.schedule.families.family_of), as an AuditError
    when no family writes it."""
    try:
        return registry_family_of(path).name
    except KeyError as e:
        raise AuditError(str(e.args[0])) from None
