"""One group-by for the columns the outputs read: rows of a family's concatenated shard columns
({column: array}) grouped by key columns, with pyarrow's hash group-by (no pandas)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_ROW = "__row"


def _key_value(v):
    """A group key as plain Python (str, int, float, bool; None for null): keys compare and sort
    as the builders' tuples did."""
    return v.as_py() if isinstance(v, pa.Scalar) else v


def row_groups(cols: dict, keys: tuple | list) -> dict[tuple, np.ndarray]:
    """{(key values...): row indices} over the rows of ``cols``, each group's rows in row order,
    groups in order of first appearance. Empty ``cols`` (a family with no shards): {}."""
    keys = tuple(keys)
    if not cols or not len(cols[keys[0]]):
        return {}
    table = pa.table({k: pa.array(np.asarray(cols[k]).tolist()) for k in keys}
                     | {_ROW: pa.array(np.arange(len(cols[keys[0]]), dtype=np.int64))})
    grouped = table.group_by(list(keys), use_threads=False).aggregate([(_ROW, "list")])
    key_cols = [grouped.column(k).to_pylist() for k in keys]
    rows = grouped.column(f"{_ROW}_list").to_pylist()
    out = {tuple(_key_value(c[i]) for c in key_cols): np.asarray(sorted(r), dtype=np.int64)
           for i, r in enumerate(rows)}
    # pyarrow's single-threaded hash group-by emits groups in order of first appearance; made
    # explicit so that a table's row order never depends on it
    return dict(sorted(out.items(), key=lambda kv: int(kv[1][0])))


def group_rows(items, key) -> dict:
    """{key(item): [items...]} for a list of Python rows (dicts), in order of first appearance;
    the group-by of rows a builder has already computed."""
    out: dict = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out
