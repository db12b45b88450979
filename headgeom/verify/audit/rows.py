"""What an audit finds behind a number besides its files: the shard rows and columns the number
was computed from (``feeding_rows``: the table's builder rerun with columns set to NaN), the config
values that shaped it, each key once (``merged_config``), and the code versions involved."""

from __future__ import annotations

import json
import math
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from headgeom import layout
from headgeom.core.provenance import code_version
from headgeom.outputs.build import prepare, traced
from headgeom.verify.audit.read import RTOL, cell_eq
from headgeom.verify.audit.rebuild import Aggregation

def code_report(table_code: dict, shard_codes: list[dict]) -> dict:
    """The table's code version, how many distinct versions its feeding shards were made with,
    and the version of the code doing the recomputation."""
    def key(c):
        return (c.get("headgeom"), c.get("source_sha256"), c.get("git_commit"), c.get("git_dirty"))

    versions = OrderedDict((key(c), c) for c in shard_codes)
    return {"table": table_code, "shards": list(versions.values()), "now": code_version()}


def merged_config(table_params: dict, shard_provs: list[dict]) -> dict:
    """The config values that shaped the number, each key once: the table's params, then the
    feeding shards' params (a key whose value differs between shards lists every value, with how
    many shards have it; a shard key equal to the table's is not repeated)."""
    out: OrderedDict[str, dict] = OrderedDict()
    for k, v in sorted(table_params.items()):
        out[k] = {"value": v, "from": "table"}
    counts: OrderedDict[str, OrderedDict[str, list]] = OrderedDict()
    for pv in shard_provs:
        for k, v in sorted((pv.get("params") or {}).items()):
            enc = json.dumps(v, sort_keys=True, default=str)
            counts.setdefault(k, OrderedDict()).setdefault(enc, [v, 0])[1] += 1
    for k in sorted(counts):
        vals = list(counts[k].values())
        if k in out and len(vals) == 1 and json.dumps(vals[0][0], sort_keys=True, default=str) == json.dumps(
                out[k]["value"], sort_keys=True, default=str):
            out[k]["from"] = "table and shards"
            continue
        if len(vals) == 1:
            entry = {"value": vals[0][0], "from": f"{vals[0][1]} shards"}
        else:
            entry = {"values": [{"value": v, "shards": n} for v, n in vals], "from": "shards"}
        out[k if k not in out else f"{k} (shards)"] = entry
    return dict(out)


TRACE_KEYS = ("model", "layer", "layer_r", "kind", "null", "sample", "test", "head", "head_i", "head_j", "head_w",
              "head_r")  # the key columns the full trace shows of a shard's rows
ID_KEYS = TRACE_KEYS + ("layer_w", "pair", "comparison", "checkpoint")  # columns that name a row, not measure it
REFINE_MAX_VALUES = 8  # a key with at most this many values in the feeding rows is tried value by value
PERTURB_BUDGET_S = 6.0  # builder reruns to find the columns the number moves with, at most this long


def _row_of(rows: list[dict], filters: dict[str, str]) -> int | None:
    hits = [i for i, r in enumerate(rows) if all(k in r and cell_eq(str(r[k]), v) for k, v in filters.items())]
    return hits[0] if len(hits) == 1 else None


def _same(a, b) -> bool:
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return (math.isnan(fa) and math.isnan(fb)) or fa == fb


def json_value(v):
    """A shard value as JSON-ready Python (NaN as None)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    return v


def feeding_rows(agg: Aggregation, workdir: Path, row_model: str | None, filters: dict[str, str], column: str,
                 feeding: set[str], max_items: int = 16) -> dict:
    """The shard rows and columns the number was computed from, found from what the table's builder reads.

    The builder is run on the listed shards with every family's columns wrapped so that the
    columns it reads are recorded (``headgeom.outputs.build.ReadLog``). Each numeric column
    read is then set to NaN in the feeding rows (those of the row's model, when the table is per
    model) and the builder run again: the columns whose loss changes the number are the ones it
    uses (within PERTURB_BUDGET_S; past it, every column read is shown). Per family: the feeding
    rows' count, for each numeric param of the table that falls inside a used column's range the
    count of rows at or above it, and the top rows (those at or above that param, or those whose
    value is the number itself, or the largest first)."""
    groups = {fam: [str(workdir / p) for p in ps] for fam, ps in agg.groups.items()}
    manifests = [str(workdir / layout.manifest(m)) for m in agg.models]
    params = dict(agg.params)
    out, data, _provs, fields = prepare("table", agg.name, groups, manifests, params)
    # the builder is rerun on the row's model's rows alone when that makes the row (faster); else on all
    full = data
    tries = [(full, list(agg.models))]
    if row_model and len(agg.models) > 1:
        own = {fam: ({c: np.asarray(v)[np.asarray(cols["model"]) == row_model] for c, v in cols.items()}
                     if isinstance(cols, dict) and "model" in cols else cols) for fam, cols in full.items()}
        tries.insert(0, (own, [row_model]))
    i = None
    for data, models in tries:
        log: dict[str, set] = {}
        t0 = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            base = out.call(traced(data, log), fields, models, params)
        t_build = time.perf_counter() - t0
        i = _row_of(base.rows, filters)
        if i is not None:
            break
    if i is None:
        return {"error": "the rebuilt table has no single row with the filters"}
    v0 = base.rows[i].get(column)

    def n_rows(cols):
        return len(next(iter(cols.values()))) if cols else 0

    masks, candidates = {}, []
    for fam in out.families:
        cols = data.get(fam) or {}
        if not cols:
            continue
        mask = np.ones(n_rows(cols), dtype=bool)
        if row_model and "model" in cols:
            mask = np.asarray(cols["model"]) == row_model
        masks[fam] = mask
        for c in sorted(log.get(fam, ())):
            a = np.asarray(cols.get(c)) if c in cols else None
            if a is not None and c not in ID_KEYS and a.dtype.kind in "fiub" and mask.any():
                candidates.append((fam, c))

    method = "perturbed"
    used: dict[str, list[str]] = {}
    needed: dict[str, list[str]] = {}  # columns the builder cannot do without (it fails when they are NaN)
    narrowed: dict[str, np.ndarray] = {}  # family -> the feeding rows that move the number
    budget, times = [PERTURB_BUDGET_S], [t_build]

    def moves(fam, cs, rows_mask):
        """Does the number change when columns cs of family fam are NaN in rows_mask? (None: the builder fails)"""
        d2 = dict(data)
        d2[fam] = dict(data[fam])
        for c in cs:
            a = np.asarray(data[fam][c])
            b = a.astype(float) if a.dtype.kind in "iub" else a.copy()
            b[rows_mask] = np.nan
            d2[fam][c] = b
        t1 = time.perf_counter()
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                t = out.call(d2, fields, models, params)
            j = _row_of(t.rows, filters)
            res = j is None or not _same(t.rows[j].get(column), v0)
        except Exception:  # noqa: BLE001 - the builder cannot do without the column
            res = None
        times.append(time.perf_counter() - t1)
        budget[0] -= times[-1]
        return res

    by_fam: OrderedDict[str, list[str]] = OrderedDict()
    for fam, c in candidates:
        by_fam.setdefault(fam, []).append(c)
    for fam, cs in by_fam.items():
        # all of a family's columns at once first: a family that does not move the number is done in one build
        if budget[0] > 0 and len(cs) > 1 and moves(fam, cs, masks[fam]) is False:
            continue
        for c in cs:
            m = moves(fam, [c], masks[fam]) if budget[0] > 0 else True
            if budget[0] <= 0:
                method = "read"  # out of time: the columns not tried are shown as read
            if m:
                used.setdefault(fam, []).append(c)
            elif m is None:
                needed.setdefault(fam, []).append(c)
    if method == "perturbed":
        # narrow the feeding rows: a key column (kind, null, ...) whose values do not all move the number
        for fam, cs in used.items():
            cols, sel = data[fam], masks[fam].copy()
            for k in ID_KEYS:
                if k == "model" or k not in cols:
                    continue
                keyvals = np.asarray(cols[k]).astype(str)
                vals = sorted(set(keyvals[sel]))
                if not 1 < len(vals) <= REFINE_MAX_VALUES or budget[0] < min(times) * len(vals):
                    continue
                keep = [v for v in vals if moves(fam, cs, sel & (keyvals == v)) is not False]
                if keep and len(keep) < len(vals):
                    sel &= np.isin(keyvals, keep)
            narrowed[fam] = sel

    families = []
    num_params = [(k, float(v)) for k, v in sorted(params.items())
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    for fam in out.families:
        if fam not in used:
            continue
        cols = data[fam]
        sel = narrowed.get(fam, masks[fam]).copy()
        for k, v in filters.items():  # the row's other keys, where the shards have that column too
            if k != "model" and k in cols:
                sub = sel & np.array([cell_eq(str(x), v) for x in np.asarray(cols[k])])
                if sub.any():
                    sel = sub
        idx = np.flatnonzero(sel)
        ids = [k for k in ID_KEYS if k in cols and len({str(x) for x in np.asarray(cols[k])[idx]}) > 1]
        unit = "heads" if "head" in cols else "rows"
        ucols = used[fam]
        counts, order = [], None
        for c in ucols:
            x = np.asarray(cols[c], dtype=float)[idx]
            fin = x[np.isfinite(x)]
            for pname, t in num_params:
                if fin.size and fin.min() <= t <= fin.max():
                    k_at = np.isfinite(x) & (x >= t)
                    counts.append({"column": c, "param": pname, "threshold": json_value(t), "count": int(k_at.sum()),
                                   "of": int(idx.size)})
                    if order is None:
                        hit = idx[k_at]
                        order = hit[np.argsort(-np.asarray(cols[c], dtype=float)[hit], kind="stable")]
        how = None
        if order is not None:
            how = f"{counts[0]['column']} ≥ {counts[0]['param']}, largest first"
        else:
            try:
                fv = float(v0)
            except (TypeError, ValueError):
                fv = float("nan")
            for c in ucols:
                x = np.asarray(cols[c], dtype=float)[idx]
                eq = np.isfinite(x) & (np.abs(x - fv) <= RTOL * max(abs(fv), 1e-300))
                if math.isfinite(fv) and eq.any():
                    order, how = idx[eq], f"{c} equal to the number"
                    break
        if order is None:
            x = np.asarray(cols[ucols[0]], dtype=float)[idx]
            order = idx[np.argsort(np.where(np.isfinite(x), -x, np.inf), kind="stable")]
            how = f"largest {ucols[0]} first"
        top = [{k: json_value(np.asarray(cols[k])[j]) for k in [*ids, *ucols]} for j in order[:max_items]]
        families.append({
            "family": fam, "shards": sum(1 for p in agg.groups.get(fam, []) if p in feeding),
            "rows": int(idx.size), "unit": unit,
            "selection": (f"model = {row_model}" if row_model else "all models")
            + "".join(f", {k} = {v}" for k, v in filters.items() if k != "model" and k in cols),
            "read": sorted(log.get(fam, ())), "used": ucols, "needed": needed.get(fam, []), "ids": ids,
            "counts": counts,
            "order": how, "top": top, "more": int(max(len(order) - max_items, 0)),
        })
    return {"method": method, "builder_seconds": round(t_build, 3), "families": families}
