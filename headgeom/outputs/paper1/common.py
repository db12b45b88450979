"""Shared by paper 1's output modules: the registration decorators, the shard families and config
params they name, LaTeX-safe columns, reading a family's columns for one table row, and the
pooled rows (every active model; the pools of ``paper1.pools``)."""

from __future__ import annotations

import numpy as np

from headgeom.outputs.formats import Column, tex_escape
from headgeom.outputs.registry import decorators

table, figure = decorators("Paper 1")

PAIRS = "paper1_pairs"
CAPACITY = "paper1_capacity"
NATURAL_RETURN = "activation_natural_return"
#: the config param of every output that takes the strong-head threshold t
STRONG_THRESHOLD_PARAM = {"strong_threshold": "tables/strong_threshold"}

NAN = float("nan")

# Header characters headgeom.outputs.formats.tex_escape leaves alone, made LaTeX-safe (captions avoid them).
_LATEX = (("²", "$^2$"), ("‖", r"$\|$"), ("≈", r"$\approx$"), ("−", "-"), ("≠", r"$\neq$"), ("<", "$<$"),
          (">", "$>$"), ("|", "$|$"))


def column(key: str, header: str, fmt: str = "{}") -> Column:
    """A table column whose LaTeX header is made safe (math characters in math mode)."""
    tex = tex_escape(header)
    for a, b in _LATEX:
        tex = tex.replace(a, b)
    return Column(key, header, fmt, latex=tex)


def interval_columns(lo: str, hi: str, label: str) -> list[Column]:
    """The two columns of a 95% interval: "<label> 95% lo" and "hi" (three decimals)."""
    return [column(lo, f"{label} 95% lo", "{:.3f}"), column(hi, "hi", "{:.3f}")]


def values(cols: dict, key: str, rows=None, dtype=float) -> np.ndarray:
    """Column ``key`` of a family's columns (empty when absent) as ``dtype`` (object columns as
    they are; dtype None: as stored), restricted to ``rows`` when given."""
    x = np.asarray(cols[key]) if key in cols else np.array([])
    if dtype is not None and x.dtype != object:
        x = x.astype(dtype)
    return x if rows is None else x[rows]


def model_rows(cols: dict, model: str) -> np.ndarray:
    """The rows of one model (boolean)."""
    if not cols or "model" not in cols:
        return np.zeros(0, dtype=bool)
    return np.asarray(cols["model"]) == model


def draws(list_column) -> np.ndarray:
    """List column (object array of arrays) -> 2-D float array (rows, draws), NaN-padded."""
    rows = [np.asarray(v, dtype=float) for v in list_column]
    if not rows:
        return np.zeros((0, 0))
    n = max(r.size for r in rows)
    out = np.full((len(rows), n), np.nan)
    for i, r in enumerate(rows):
        out[i, : r.size] = r
    return out


def count_of(k: int, n: int) -> str:
    """A cell "k/n" ("–" when n is 0)."""
    return f"{k}/{n}" if n else "–"


def share(mask) -> float:
    """The share of True in a boolean array (NaN when empty)."""
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if mask.size else NAN


def percent(k, n) -> float:
    """100 k / n (NaN when n is 0)."""
    return 100.0 * k / n if n else NAN


def thresholds(sweep) -> list[float]:
    """The thresholds of ``paper1.sweep`` as floats."""
    return [float(t) for t in sweep]


def pool_members(models: list[str], pools: dict | None) -> list[tuple[str, list[str]]]:
    """A table's pooled rows and their models: ("pooled", every active model) with two or more, then
    ("pooled <name>", the pool's active models) for each pool of ``paper1.pools`` with any."""
    out = [("pooled", list(models))] if len(models) > 1 else []
    for name, members in (pools or {}).items():
        present = [m for m in members if m in models]
        if present:
            out.append((f"pooled {name}", present))
    return out


def row_selections(cols: dict, models: list[str], pools: dict | None = None) -> list[tuple[str, np.ndarray, list]]:
    """(row label, selection, models pooled) per model (nothing pooled), then per pooled row (``pool_members``)."""
    groups = [(m, model_rows(cols, m), []) for m in models]
    mod = np.asarray(cols.get("model", []))
    return groups + [(label, np.isin(mod, members), members) for label, members in pool_members(models, pools)]


def pooled_models(members: list) -> str | None:
    """The pooled-models cell: the models a pooled row pools ("a, b"), None for a model's row."""
    return ", ".join(members) if members else None
