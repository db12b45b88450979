"""The claims ledger (config/claims.yaml): each number the papers report, beside the pipeline's.

``build_claims(ledger, tables_dir, models_run)`` expands the ledger into one row per claimed
number, reads the pipeline's value from ``results/tables/<table>.csv`` for the models that have
been run, and says whether it agrees at the paper's printed precision. A claim whose models
were not run says "not run"; one the pipeline does not compute says so, with the reason."""

from __future__ import annotations

import csv
from pathlib import Path

from headgeom.core.errors import ConfigError
from headgeom.io.files import sha256_file, write_set, write_text
from headgeom.core.provenance import code_version
from headgeom.outputs.formats import POOLED_MODELS, Column, Table
from headgeom.publish.claim_forms import _fmt, _is_nan_cell, _num, agrees, nan_rule, reduce_per, reduce_values, unreadable

REDUCERS = ("one", "each", "range", "min", "max", "sum", "sumfrac", "sumfrac_pct", "sumden", "median", "count", "countfrac", "rows",
            "list", "ratio", "sharecount", "countof")
PER_REDUCERS = ("ratio", "sharecount", "countof")  # read a second column, the entry's `per`

# Why a number stays "not computed": every such entry's reason starts "not computed: " and then one
# of these (tests/workflow/test_claims.py checks the ledger against this list).
NOT_COMPUTED_REASONS = (
    "a setting of the study",
    "the paper's in-house run",
    "a property of a format",
)
POOLED_LABELS = {"pooled", "–", "-", "", "all (final)"}  # and every "pooled <name>"

# statuses
AGREES, DIFFERS, NOT_RUN, PARTIAL, NO_ROW, NOT_COMPUTED, NOT_BUILT, NOT_COMPARABLE = (
    "agrees", "differs", "not run", "partial", "no row", "not computed by the pipeline", "table not built",
    "not comparable")


# ------------------------------------------------------------------ the ledger


class LedgerError(ConfigError, ValueError):
    """The ledger (config/claims.yaml) cannot be read as written: a malformed entry, or a value
    whose form no rule reads."""


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
                raise LedgerError(f"{path}: a claim under {paper!r} has no id: {e}")
            if cid in seen:
                raise LedgerError(f"{path}: duplicate claim id {cid!r}")
            seen.add(cid)
            if ("model" in e) == ("models" in e):
                raise LedgerError(f"{path}: claim {cid}: give exactly one of model / models")
            if "derive" in e:
                from headgeom.publish.claims_derive import DERIVATIONS

                if e["derive"] not in DERIVATIONS or "table" in e or "value" not in e or not e.get("note"):
                    raise LedgerError(f"{path}: claim {cid}: derive names one of {sorted(DERIVATIONS)}, with a value, "
                                      "a note saying the derivation and no table")
            elif "table" in e:
                if ("values" in e) == ("column" in e):
                    raise LedgerError(f"{path}: claim {cid}: give either column + value or values")
                if "column" in e and "value" not in e:
                    raise LedgerError(f"{path}: claim {cid}: column without value")
            elif ("value" in e) == ("values" in e) or not e.get("reason"):
                raise LedgerError(f"{path}: claim {cid}: without a table it needs value (or values) and reason")
            for flt in [e.get("row") or {}] + list(e.get("rows") or []):
                if any(not isinstance(k, str) for k in flt):  # YAML reads a bare `null:` key as None
                    raise LedgerError(f"{path}: claim {cid}: a row filter key is not a column name "
                                     f"({sorted(map(repr, flt))}; quote \"null\")")
            red = e.get("reduce", "one")
            if red not in REDUCERS:
                raise LedgerError(f"{path}: claim {cid}: reduce {red!r} not in {REDUCERS}")
            if "nan" in e and (not str(e["nan"]).startswith(("exclude:", "fail")) or
                               str(e["nan"]).startswith("exclude:") and not nan_rule(e)):
                raise LedgerError(f"{path}: claim {cid}: nan must be 'fail' or 'exclude: <why>', not {e['nan']!r}")
            for col, val, _, tol in (_expand(e) if "table" in e or "derive" in e else ()):  # the judged values
                why = unreadable(val, tol)
                if why:
                    raise LedgerError(f"{path}: claim {cid}{'.' + col if 'values' in e else ''}: cannot read {val!r}: {why}")
            out.append(e)
    return out


def ledger_tables(ledger: list[dict]) -> list[str]:
    return sorted({e["table"] for e in ledger if e.get("table")})


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
            if e.get("derive"):
                _derive_claim(rec, e, claim, tol)
            elif not table:
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


def _reduce_read(rec, e, how, cells, dens):
    """The entry's reduction of the cells read, by its NaN rule: NaN cells excluded where the entry
    says so and why (the note counts them), else kept (the reduction cannot agree; the note says
    how many were NaN). ``rows`` counts rows whatever they hold."""
    nan = [i for i, c in enumerate(cells) if _is_nan_cell(c) or (dens and _is_nan_cell(dens[i]))]
    why = nan_rule(e)
    if nan and how != "rows":
        if why is not None:
            keep = [i for i in range(len(cells)) if i not in set(nan)]
            cells, dens = [cells[i] for i in keep], [dens[i] for i in keep] if dens else dens
            text = f"{len(nan)} of {len(nan) + len(cells)} cells NaN, excluded: {why}"
        else:
            text = f"{len(nan)} of {len(cells)} cells NaN: no verdict"
        rec["note"] = "; ".join(x for x in (text, rec["note"]) if x)
    if not cells:
        return None, "–"
    if how in PER_REDUCERS:
        return reduce_per(cells, dens, how)
    return reduce_values(cells, how)


def _derive_claim(rec, e, claim, tol):
    """A number the papers derive (claims_derive.DERIVATIONS), computed from the papers' settings."""
    from headgeom.publish.claims_derive import derived

    value, where = derived(e)
    rec["pipeline"], rec["value"], rec["read"] = _fmt(value), value, where
    rec["status"] = AGREES if agrees(claim, value, tol) else DIFFERS


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
    per = e.get("per") if e.get("reduce") in PER_REDUCERS else None
    if per is not None and per not in cols:
        rec["status"] = NO_ROW
        rec["note"] = "; ".join(x for x in (f"the table has no column {per!r}", rec["note"]) if x)
        return
    cells, dens, missing = [], [], []
    for f in filters:
        hits = [r for r in trows if _match(r, f)]
        if e.get("over_rows") and hits:
            cells += [r[col] for r in hits]
            dens += [r[per] for r in hits] if per else []
        elif len(hits) == 1:
            cells.append(hits[0][col])
            dens += [hits[0][per]] if per else []
        else:
            missing.append(", ".join(f"{k}={v}" for k, v in f.items()) + ("" if not hits else f" ({len(hits)} rows)"))
    rec["read"] = f"{e['table']}[{'; '.join(', '.join(f'{k}={v}' for k, v in f.items()) for f in filters[:3])}" \
                  f"{'; …' if len(filters) > 3 else ''}].{col}"
    if not cells:
        rec["status"] = NO_ROW
        rec["note"] = "; ".join(x for x in ("no row " + "; ".join(missing), rec["note"]) if x)
        return
    how = e.get("reduce", "one")
    n_read = len(cells)
    value, shown = _reduce_read(rec, e, how, cells, dens)
    rec["pipeline"] = shown
    rec["value"] = value  # unformatted, for the macros (headgeom.publish.macros); not a column of the table
    if missing:
        rec["note"] = "; ".join(x for x in ("no row " + "; ".join(missing), rec["note"]) if x)
    if len(run) < len(models):
        rec["status"] = f"{PARTIAL} ({len(run)} of {len(models)} models run)"
    elif missing:
        rec["status"] = f"{PARTIAL} ({n_read} of {len(filters)} rows)"
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
        notes=f"Run models: {', '.join(models_run) or 'none'}. {len(rows)} claims: {summary}. 'agrees': by the rule "
              "the paper's wording names (rule_of: a value at its printed precision, ranges end by end, 'near' / "
              "'of order' on a log scale, bounds, 'within', sets, k/n, quantified statements over every value "
              "read; a NaN, ±inf or missing value never agrees, and a reduction over NaN cells only where the entry "
              "excludes them, saying why; a 'derived:' read is computed from the papers' settings whatever was run). "
              "'not run': the claim's model is not among the run "
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
        "aggregation": "headgeom.publish.claims.build_claims",
        "params": {"models": list(models_run)},
        "code": code_version(),
        "columns": [c.key for c in t.columns],
        "ledger": {"path": str(ledger_path), "sha256": sha256_file(ledger_path), "claims": len(ledger)},
        "inputs": [{"path": str(p), "sha256": sha256_file(p)} for _, p in sorted(read.items())],
    })
    return t
