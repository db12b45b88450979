"""The pipeline's numbers as LaTeX macros, for a manuscript that cites them.

``results/tables/claims_macros.tex``: two macros per ledger entry (config/claims.yaml), the
pipeline's value at the paper's printed precision and its verdict::

    \\newcommand{\\hgPkTOneOneTwoFourMOMinAngle}{8.8}  % pk.t1.124m.O.min_angle: paper 8.8
    \\newcommand{\\hgPkTOneOneTwoFourMOMinAngleVerdict}{agrees}

``results/tables/cell_macros.tex``: one macro per cell named in the config (``claims.macros``:
name, table, row, column, format). Each file starts with the code version and the hash of the
config the run used. Macro names are TeX control words (letters only): a ledger id is written
"hg" + its parts capitalised (a one-letter part keeps its case), digits spelled ("pk.t1.124m.d" ->
"hgPkTOneOneTwoFourMd"); ``macro_name`` gives it, and two entries that would share a name are an error."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from headgeom.core.provenance import code_version
from headgeom.io.files import write_text
from headgeom.outputs.formats import tex_escape
from headgeom.publish.claim_forms import _BOUND, _FRAC, _RANGE
from headgeom.publish.claims import build_rows, load_ledger

DIGITS = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine")
CONTROL_WORD = re.compile(r"^[A-Za-z]+$")
NO_VALUE = "--"  # the value macro of an entry the pipeline has no value for (not run, not computed)


class MacroError(ValueError):
    """A macro cannot be written as asked (a name that is not a control word, a repeated name, no such cell)."""


def macro_name(claim_id: str, prefix: str = "hg") -> str:
    """A TeX control word for a ledger id: prefix + each alphanumeric part capitalised, digits spelled."""
    out = prefix
    for part in re.split(r"[^A-Za-z0-9]+", claim_id):
        if len(part) == 1 and part.isalpha():  # a one-letter part keeps its case: ".d" and ".D" are two columns
            out += part
            continue
        for run in re.findall(r"[0-9]|[A-Za-z]+", part):
            out += DIGITS[int(run)] if run.isdigit() else run[0].upper() + run[1:]
    return out


def config_hash(config: dict) -> str:
    """sha256 of the config as canonical JSON (keys sorted): what the macro files record."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def _decimals(text: str) -> int | None:
    try:
        return max(0, -Decimal(text.strip()).as_tuple().exponent)
    except (InvalidOperation, TypeError):
        return None


def at_precision(printed: str, x: float) -> str | None:
    """x written as the paper printed ``printed``: as many decimals, or the same mantissa digits
    in scientific notation ("1.04e-4"); None when ``printed`` is not a plain number."""
    t = printed.strip()
    if not isinstance(x, (int, float)) or math.isnan(x) or _decimals(t) is None:
        return None
    if "e" in t.lower():
        mant = t.lower().split("e")[0]
        s = f"{x:.{_decimals(mant)}e}"
        m, e = s.split("e")
        return f"{m}e{int(e)}"
    return f"{x:.{_decimals(t)}f}"


def pipeline_text(paper_value: str, value, shown: str) -> str:
    """The pipeline's value as the paper would print it: a number at the printed precision, a
    range end by end, a fraction as k/n; else (a bound, a list, a percentage) as the claims
    table shows it."""
    pv = str(paper_value).strip()
    if not _has_value(value):  # NaN, ±inf or nothing: no value, as for an entry not run
        return NO_VALUE
    if isinstance(value, tuple) and len(value) == 2:
        m = _RANGE.match(pv)
        if m and not all(isinstance(v, int) for v in value):
            lo, hi = at_precision(m.group(1), value[0]), at_precision(m.group(2), value[1])
            if lo and hi:
                return f"{lo}--{hi}"
        if all(isinstance(v, int) for v in value):
            return f"{value[0]}/{value[1]}"
    if isinstance(value, (int, float)) and not (_BOUND.match(pv) or _FRAC.match(pv) or _RANGE.match(pv)):
        s = at_precision(pv, float(value))  # a bound ("> 0") has no precision to keep: shown as the table shows it
        if s:
            return s
    return tex_escape(shown) if shown not in ("", "–") else NO_VALUE


def _has_value(value) -> bool:
    """A value a macro can print: a finite number, a tuple of them, or text (a list of cells);
    None, NaN and ±inf are no value."""
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_has_value(v) for v in value)
    if isinstance(value, str):
        return value.strip() not in ("", "–", "-") and value.strip().lower() not in ("nan", "inf", "-inf", "+inf")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _line(name: str, body: str, comment: str = "") -> str:
    if not CONTROL_WORD.match(name):
        raise MacroError(f"macro name {name!r} is not a TeX control word (letters only)")
    return f"\\newcommand{{\\{name}}}{{{body}}}" + (f"  % {comment}" if comment else "")


def _header(what: str, config_sha256: str) -> list[str]:
    code = code_version()
    commit = code.get("git_commit", "no git commit")
    dirty = " (dirty)" if code.get("git_dirty") else ""
    return [f"% {what}, written by headgeom (do not edit: rebuilt with the pipeline)",
            f"% code: headgeom {code.get('headgeom')} git {commit}{dirty}, source sha256 {code.get('source_sha256')}",
            f"% config sha256: {config_sha256}"]


def _unique(names: list[str]) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise MacroError(f"two macros named \\{n}")
        seen.add(n)


def claims_macros(ledger_path, tables_dir, models_run, config_sha256: str) -> str:
    """The text of claims_macros.tex."""
    rows, _ = build_rows(load_ledger(ledger_path), tables_dir, models_run)
    lines, names = _header(f"The claims ledger ({Path(ledger_path).name}) as macros: per entry its pipeline "
                           "value at the paper's printed precision, and <name>Verdict", config_sha256), []
    for r in rows:
        name = macro_name(r["id"])
        value = pipeline_text(r["paper_value"], r.get("value"), r["pipeline"]) if "value" in r else NO_VALUE
        names += [name, name + "Verdict"]
        lines.append(_line(name, value, f"{r['id']}: paper {r['paper_value']}".replace("%", r"\%")))
        lines.append(_line(name + "Verdict", tex_escape(r["status"])))
    _unique(names)
    return "\n".join(lines) + "\n"


def _cell(tables_dir: Path, spec: dict) -> str:
    path = Path(tables_dir) / f"{spec['table']}.csv"
    if not path.exists():
        raise MacroError(f"macro {spec['name']}: no table {path}")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    want = {k: str(v) for k, v in (spec.get("row") or {}).items()}
    hits = [r for r in rows if all(r.get(k) == v for k, v in want.items())]
    if len(hits) != 1 or spec["column"] not in hits[0]:
        raise MacroError(f"macro {spec['name']}: {len(hits)} rows of {spec['table']} match {want} "
                         f"(need one, with a column {spec['column']!r})")
    return hits[0][spec["column"]]


def cell_macros(specs: list[dict], tables_dir, config_sha256: str) -> str:
    """The text of cell_macros.tex: one macro per ``claims.macros`` entry, its cell formatted by
    ``format`` (a Python format spec, default ".4g"; a cell that is not a number as written; an
    empty, NaN or ±inf cell ``--``, as the ledger macros write no value)."""
    lines = _header("Table cells named in the config (claims.macros) as macros", config_sha256)
    for s in specs:
        cell = _cell(Path(tables_dir), s)
        try:
            x = float(cell)
            body = format(x, s.get("format", ".4g")) if math.isfinite(x) else NO_VALUE
        except ValueError:
            body = tex_escape(cell) if cell.strip() not in ("", "–", "-") else NO_VALUE  # an empty cell: no value
        where = ", ".join(f"{k}={v}" for k, v in (s.get("row") or {}).items())
        lines.append(_line(s["name"], body, f"{s['table']}[{where}].{s['column']}"))
    _unique([s["name"] for s in specs])
    return "\n".join(lines) + "\n"


def macros_job(ledger_path, tables_dir, models_run, specs, config_sha256: str, outputs: dict) -> None:
    """Write claims_macros.tex and cell_macros.tex (outputs: {'claims': path, 'cells': path})."""
    write_text(outputs["claims"], claims_macros(ledger_path, tables_dir, models_run, config_sha256))
    write_text(outputs["cells"], cell_macros(specs, tables_dir, config_sha256))
