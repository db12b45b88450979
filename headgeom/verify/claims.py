"""The claims ledger (config/claims.yaml): each number the papers report, beside the pipeline's.

``build_claims(ledger, tables_dir, models_run)`` expands the ledger into one row per claimed
number, reads the pipeline's value from ``results/tables/<table>.csv`` for the models that have
been run, and says whether it agrees at the paper's printed precision. A claim whose models
were not run says "not run"; one the pipeline does not compute says so, with the reason."""

from __future__ import annotations

import csv
import math
import re
import statistics
from decimal import Decimal, InvalidOperation
from pathlib import Path

from headgeom.io.files import sha256_file, write_set, write_text
from headgeom.core.provenance import code_version
from headgeom.outputs.formats import POOLED_MODELS, Column, Table

REDUCERS = ("one", "range", "min", "max", "sum", "sumfrac", "sumfrac_pct", "sumden", "median", "count", "countfrac", "rows", "list")

# Why a number stays "not computed": every such entry's reason starts "not computed: " and then one
# of these (tests/unit/test_claims.py checks the ledger against this list).
NOT_COMPUTED_REASONS = (
    "a setting of the study",
    "arithmetic on printed values",
    "the paper's in-house run",
    "a property of a format",
)


def reason_category(reason: str) -> str | None:
    """The fixed category a "not computed" reason belongs to, or None when it is outside the list."""
    text = str(reason or "").strip()
    if not text.startswith("not computed: "):
        return None
    text = text[len("not computed: "):]
    return next((c for c in NOT_COMPUTED_REASONS if text.startswith(c)), None)
POOLED_LABELS = {"pooled", "–", "-", "", "all (final)"}  # and every "pooled <name>"

# statuses
AGREES, DIFFERS, NOT_RUN, PARTIAL, NO_ROW, NOT_COMPUTED, NOT_BUILT, NOT_COMPARABLE = (
    "agrees", "differs", "not run", "partial", "no row", "not computed by the pipeline", "table not built",
    "not comparable")


# ------------------------------------------------------------------ the ledger


def load_ledger(path) -> list[dict]:
    """Read config/claims.yaml into a flat list of entries (paper filled in, checked)."""
    return _load_one(path)


def _load_one(path) -> list[dict]:
    import yaml

    class _Loader(yaml.SafeLoader):
        """Numbers stay as written ("6.130", "1e-10"): their printed precision is the claim."""

    for tag in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int"):
        _Loader.add_constructor(tag, lambda loader, node: loader.construct_scalar(node))
    doc = yaml.load(Path(path).read_text(), Loader=_Loader) or {}
    groups = doc.get("claims") or {}
    out, seen = [], set()
    for paper, entries in groups.items():
        for e in entries or []:
            e = dict(e)
            e.setdefault("paper", paper)
            cid = e.get("id")
            if not cid:
                raise ValueError(f"{path}: a claim under {paper!r} has no id: {e}")
            if cid in seen:
                raise ValueError(f"{path}: duplicate claim id {cid!r}")
            seen.add(cid)
            if ("model" in e) == ("models" in e):
                raise ValueError(f"{path}: claim {cid}: give exactly one of model / models")
            if "table" in e:
                if ("values" in e) == ("column" in e):
                    raise ValueError(f"{path}: claim {cid}: give either column + value or values")
                if "column" in e and "value" not in e:
                    raise ValueError(f"{path}: claim {cid}: column without value")
            elif ("value" in e) == ("values" in e) or not e.get("reason"):
                raise ValueError(f"{path}: claim {cid}: without a table it needs value (or values) and reason")
            for flt in [e.get("row") or {}] + list(e.get("rows") or []):
                if any(not isinstance(k, str) for k in flt):  # YAML reads a bare `null:` key as None
                    raise ValueError(f"{path}: claim {cid}: a row filter key is not a column name "
                                     f"({sorted(map(repr, flt))}; quote \"null\")")
            red = e.get("reduce", "one")
            if red not in REDUCERS:
                raise ValueError(f"{path}: claim {cid}: reduce {red!r} not in {REDUCERS}")
            out.append(e)
    return out


def ledger_tables(ledger: list[dict]) -> list[str]:
    return sorted({e["table"] for e in ledger if e.get("table")})


# ------------------------------------------------------------------ values


def _num(s):
    """float of a cell or claim value, or None."""
    if s is None:
        return None
    if isinstance(s, bool):
        return None
    if isinstance(s, (int, float)):
        return float(s)
    text = str(s).strip()
    m = _NPREPR.match(text)  # "np.float64(25.0)": a numpy scalar's repr in a CSV cell
    if m:
        text = m.group(1)
    try:
        return float(text)
    except ValueError:
        return None


_NPREPR = re.compile(r"^np\.\w+\((.*)\)$")
_RANGE = re.compile(r"^\s*(\S+)\s*(?:–|—|-(?=\s)|to)\s*(\S+)\s*$")
_FRAC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_BOUND = re.compile(r"^\s*(<=|>=|<|>|≤|≥)\s*(\S+)\s*$")


def _half_unit(text: str) -> float:
    """Half a unit in the last printed digit of a number as written ("0.059" -> 0.0005,
    "1.04e-4" -> 5e-7, "338" -> 0.5)."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        return 0.0
    return 0.5 * 10.0 ** d.as_tuple().exponent


def _fmt(x) -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4g}"
    return str(x)


def _agree_number(claim: str, x: float, tol) -> bool:
    v = _num(claim)
    if v is None or x is None or math.isnan(x):
        return False
    if tol == "order":
        if v <= 0 or x <= 0:
            return v == x
        return math.floor(math.log10(v) + 1e-9) == math.floor(math.log10(x) + 1e-9)
    if isinstance(tol, (int, float)) and not isinstance(tol, bool):
        return abs(x - v) <= float(tol)
    return abs(x - v) <= _half_unit(claim) * (1 + 1e-9) + 1e-12 * abs(v)


def agrees(claim, got, tol=None) -> bool:
    """Does the pipeline's value agree with the claim as printed?

    claim: the paper's value (number, "a – b", "k / n", "< x", "all"); got: the pipeline's value
    (float, (lo, hi) for a range, (k, n) for a fraction, or a cell string)."""
    c = str(claim).strip()
    if isinstance(got, str):
        got_s = got.strip()
        if got_s == c or re.sub(r"\s+", "", got_s) == re.sub(r"\s+", "", c):
            return True
        m = _FRAC.match(got_s)
        if m:
            got = (int(m.group(1)), int(m.group(2)))
        else:
            m = _RANGE.match(got_s)
            if m and _num(m.group(1)) is not None and _num(m.group(2)) is not None:
                got = (_num(m.group(1)), _num(m.group(2)))
            elif _num(got_s) is not None:
                got = _num(got_s)
            else:
                return False
    if c == "all" and isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, int) for v in got):
        return got[0] == got[1]
    m = _BOUND.match(c)
    if m and isinstance(got, float):
        op, b = m.group(1), _num(m.group(2))
        return {"<": got < b, "<=": got <= b, "≤": got <= b, ">": got > b, ">=": got >= b, "≥": got >= b}[op]
    m = _FRAC.match(c)
    if m:
        return isinstance(got, tuple) and tuple(int(v) for v in got) == (int(m.group(1)), int(m.group(2)))
    m = _RANGE.match(c)
    if m and _num(m.group(1)) is not None:
        if not (isinstance(got, tuple) and len(got) == 2):
            return False
        return _agree_number(m.group(1), float(got[0]), tol) and _agree_number(m.group(2), float(got[1]), tol)
    if isinstance(got, (int, float)):
        return _agree_number(c, float(got), tol)
    return False


def _truth(cell) -> int | None:
    """1 / 0 for a boolean or numeric cell ("True", "False", "1", "0.0"); None otherwise (empty cells too)."""
    t = str(cell).strip()
    if t in ("True", "true"):
        return 1
    if t in ("False", "false"):
        return 0
    v = _num(t)
    return None if v is None or math.isnan(v) else int(v != 0)


def _frac_of(cell: str):
    m = _FRAC.match(cell or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def reduce_values(cells: list[str], how: str):
    """Combine the cells of several rows; returns (value for agreement, display string)."""
    if how == "sumden":  # the denominators of "k/n" cells added: how many the fractions count
        fr = [_frac_of(c) for c in cells]
        if any(f is None for f in fr):
            return None, "; ".join(cells)
        n = sum(f[1] for f in fr)
        return float(n), str(n)
    if how in ("sumfrac", "sumfrac_pct"):
        fr = [_frac_of(c) for c in cells]
        if any(f is None for f in fr):
            return None, "; ".join(cells)
        k, n = sum(f[0] for f in fr), sum(f[1] for f in fr)
        if how == "sumfrac":
            return (k, n), f"{k}/{n}"
        pct = 100.0 * k / n if n else float("nan")
        return pct, f"{pct:.2f} ({k}/{n})"
    if how == "list":  # the cells themselves, in row order ("7, 9"): a list of layers
        shown = ", ".join(_fmt(_num(c)) if _num(c) is not None else c for c in cells)
        return shown, shown
    if how == "rows":  # how many rows were read (with over_rows: how many rows the filters match)
        return float(len(cells)), str(len(cells))
    if how in ("count", "countfrac"):  # cells that are true ("True", or a nonzero number): how many, of how many
        vals = [_truth(c) for c in cells]
        if any(v is None for v in vals):
            return None, "; ".join(cells)
        k = sum(vals)
        return ((float(k), f"{k}") if how == "count" else ((k, len(vals)), f"{k}/{len(vals)}"))
    if how == "one":
        c = cells[0]
        v = _num(c)
        return (v if v is not None else c), (_fmt(v) if v is not None and not _frac_of(c) else c)
    nums = [_num(c) for c in cells]
    if any(v is None for v in nums):
        return None, "; ".join(cells)
    fin = [v for v in nums if not math.isnan(v)]
    if not fin:
        return float("nan"), "nan"
    if how == "range":
        lo, hi = min(fin), max(fin)
        return (lo, hi), f"{_fmt(lo)} – {_fmt(hi)}"
    if how == "min":
        return min(fin), _fmt(min(fin))
    if how == "max":
        return max(fin), _fmt(max(fin))
    if how == "sum":
        s = sum(fin)
        return s, _fmt(s)
    if how == "median":
        med = statistics.median(fin)
        return med, _fmt(med)
    raise ValueError(how)


# ------------------------------------------------------------------ tables


class _Tables:
    def __init__(self, tables_dir: Path):
        self.dir = Path(tables_dir)
        self._cache: dict[str, tuple[list[str], list[dict]] | None] = {}
        self.read: dict[str, Path] = {}

    def get(self, name: str):
        if name not in self._cache:
            p = self.dir / f"{name}.csv"
            if p.exists():
                with open(p, newline="") as fh:
                    r = csv.DictReader(fh)
                    self._cache[name] = (list(r.fieldnames or []), list(r))
                self.read[name] = p
            else:
                self._cache[name] = None
        return self._cache[name]

    def headers(self, name: str) -> dict[str, str]:
        """column key -> header as the table's Markdown prints it."""
        p = self.dir / f"{name}.md"
        t = self.get(name)
        if not p.exists() or not t:
            return {}
        for line in p.read_text().splitlines():
            if line.startswith("| "):
                heads = [h.strip() for h in line.strip().strip("|").split("|")]
                return dict(zip(t[0], heads)) if len(heads) == len(t[0]) else {}
        return {}


def _match(row: dict, filt: dict) -> bool:
    for k, v in filt.items():
        cell = row.get(k)
        if cell is None:
            return False
        if str(cell) == str(v):
            continue
        a, b = _num(cell), _num(v)
        if a is None or b is None or a != b:
            return False
    return True


def _expand(entry: dict) -> list[tuple[str, str, str, str]]:
    """(column, paper value, quantity, tol) for each number the entry claims."""
    if "values" in entry:
        q = entry.get("quantities") or {}
        return [(col, val, q.get(col, ""), entry.get("tol")) for col, val in entry["values"].items()]
    return [(entry.get("column", ""), entry["value"], entry.get("quantity", ""), entry.get("tol"))]


def build_rows(ledger: list[dict], tables_dir, models_run) -> tuple[list[dict], dict[str, Path]]:
    tabs = _Tables(tables_dir)
    active = set(models_run)
    rows = []
    for e in ledger:
        models = [e["model"]] if "model" in e else list(e["models"])
        label = e["model"] if "model" in e else f"{len(models)} models: " + ", ".join(models)
        table = e.get("table")
        t = tabs.get(table) if table else None
        # a model counts as run when it is active or when the table has its rows (lineage checkpoints)
        seen = set()
        if t:
            for r in t[1]:
                seen |= {r.get("model"), r.get("checkpoint")}
        run = [m for m in models if m in active or m in seen]
        headers = tabs.headers(table) if table else {}
        # a header alone ("Pairs") says little: add what selects the row ("writing, within layer")
        which = ", ".join(str(v) if k in ("comparison", "pair", "test", "lineage", "checkpoint") else f"{k} {v}"
                          for k, v in (e.get("row") or {}).items() if k != "model" and "{model}" not in str(v))
        for col, claim, quantity, tol in _expand(e):
            if not quantity:
                quantity = (headers.get(col) or col) + (f" ({which})" if which else "")
                if "values" in e and e.get("quantity"):
                    quantity = f"{e['quantity']}: {headers.get(col) or col}"
            rec = {
                "id": e["id"] + (f".{col}" if "values" in e else ""),
                "paper": e["paper"], "where": e.get("where", ""), "model": label,
                "quantity": quantity or e.get("quantity", ""),
                "paper_value": _fmt(claim), "pipeline": "–", "status": "", "note": e.get("note", ""),
                "read": f"{table}: {col}" if table else "",
            }
            if not table:
                rec["status"] = NOT_COMPUTED
                rec["note"] = "; ".join(x for x in (e.get("reason", ""), rec["note"]) if x)
            elif not run:
                rec["status"] = NOT_RUN
            elif t is None:
                rec["status"] = NOT_BUILT
            else:
                _read_claim(rec, e, t, col, claim, tol, models, run)
            rows.append(rec)
    return rows, tabs.read


def _is_pooled_label(v) -> bool:
    return v in POOLED_LABELS or str(v).startswith("pooled ")


def _pooled(column: str, trows: list[dict], filters: list[dict]) -> set:
    """The models a claim's pooled row pools: its pooled_models cell (a pool of paper1.pools), else
    every per-model row of the table (a row that pools every active model)."""
    named = {str(r.get(POOLED_MODELS) or "") for f in filters for r in trows if _match(r, f)} - {"", "–", "-"}
    if len(named) == 1:
        return {m.strip() for m in named.pop().split(",")}
    return {r.get(column) for r in trows if not _is_pooled_label(r.get(column))} - {None}


def row_filters(e: dict, cols: list[str], run: list[str]) -> list[dict]:
    """The row filters a ledger entry reads (each selects one row, or with over_rows every row it
    matches): a template per run model, or a list of rows; the entry's model added where the
    table has a model column and the filter names none."""
    filters = []
    templates = e.get("rows") or [e.get("row") or {}]
    for tpl in templates:
        if any("{model}" in str(v) for v in tpl.values()):
            filters += [{k: str(v).replace("{model}", m) for k, v in tpl.items()} for m in run]
        else:
            f = dict(tpl)
            if "model" in e and "model" not in f and "model" in cols:
                f["model"] = e["model"]
            filters.append(f)
    return filters


def _read_claim(rec, e, t, col, claim, tol, models, run):
    cols, trows = t
    if col not in cols:
        rec["status"] = NO_ROW
        rec["note"] = "; ".join(x for x in (f"the table has no column {col!r}", rec["note"]) if x)
        return
    filters = row_filters(e, cols, run)
    if e.get("pooled_over"):
        pooled = _pooled(e["pooled_over"], trows, filters)
        if pooled != set(models):
            rec["status"] = NOT_COMPARABLE if pooled else NOT_RUN
            rec["note"] = "; ".join(x for x in (
                f"the pipeline's pooled row pools {', '.join(sorted(pooled)) or 'nothing'}, not the claim's models",
                rec["note"]) if x)
            return
    cells, missing = [], []
    for f in filters:
        hits = [r for r in trows if _match(r, f)]
        if e.get("over_rows") and hits:
            cells += [r[col] for r in hits]
        elif len(hits) == 1:
            cells.append(hits[0][col])
        else:
            missing.append(", ".join(f"{k}={v}" for k, v in f.items()) + ("" if not hits else f" ({len(hits)} rows)"))
    rec["read"] = f"{e['table']}[{'; '.join(', '.join(f'{k}={v}' for k, v in f.items()) for f in filters[:3])}" \
                  f"{'; …' if len(filters) > 3 else ''}].{col}"
    if not cells:
        rec["status"] = NO_ROW
        rec["note"] = "; ".join(x for x in ("no row " + "; ".join(missing), rec["note"]) if x)
        return
    how = e.get("reduce", "one")
    value, shown = reduce_values(cells, how)
    rec["pipeline"] = shown
    rec["value"] = value  # unformatted, for the macros (headgeom.verify.macros); not a column of the table
    if missing:
        rec["note"] = "; ".join(x for x in ("no row " + "; ".join(missing), rec["note"]) if x)
    if len(run) < len(models):
        rec["status"] = f"{PARTIAL} ({len(run)} of {len(models)} models run)"
    elif missing:
        rec["status"] = f"{PARTIAL} ({len(cells)} of {len(filters)} rows)"
    else:
        rec["status"] = AGREES if value is not None and agrees(claim, value, tol) else DIFFERS


COLUMNS = [
    Column("id", "Claim"), Column("paper", "Paper"), Column("where", "Where"), Column("model", "Model"),
    Column("quantity", "Quantity"), Column("paper_value", "Paper"), Column("pipeline", "Pipeline"),
    Column("status", "Status"), Column("read", "Read from"), Column("note", "Note"),
]


def build_claims(ledger: list[dict], tables_dir, models_run) -> Table:
    rows, _ = build_rows(ledger, tables_dir, models_run)
    return _table(rows, models_run)


def _table(rows, models_run) -> Table:
    counts = {}
    for r in rows:
        k = r["status"].split(" (")[0]
        counts[k] = counts.get(k, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    return Table(
        name="claims",
        caption="The papers' reported numbers beside the pipeline's (config/claims.yaml).",
        columns=COLUMNS,
        rows=rows,
        notes=f"Run models: {', '.join(models_run) or 'none'}. {len(rows)} claims: {summary}. 'agrees': equal at the "
              "paper's printed precision (ranges end by end). 'not run': the claim's model is not among the run "
              "models. 'partial': some of its models were run (no verdict). p1 = Feng & Li (arXiv 2609.01129); "
              "pk = the PK paper.",
    )


def claims_job(ledger_path, tables_dir, models_run: list[str], outputs: dict) -> Table:
    """Write results/tables/claims.{csv,md,tex} and its provenance sidecar."""
    ledger = load_ledger(ledger_path)
    rows, read = build_rows(ledger, tables_dir, models_run)
    t = _table(rows, models_run)
    if "html" in outputs:  # the report's view of the table; not in the sidecar (as the registry's tables)
        write_text(outputs["html"], t.html())
    write_set(outputs, {"csv": t.csv(), "md": t.markdown(), "tex": t.latex()}, {
        "table": "claims",
        "aggregation": "headgeom.verify.claims.build_claims",
        "params": {"models": list(models_run)},
        "code": code_version(),
        "columns": [c.key for c in t.columns],
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path), "claims": len(ledger)},
        "inputs": [{"path": str(p), "sha256": sha256_file(p)} for _, p in sorted(read.items())],
    })
    return t
