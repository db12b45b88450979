"""Comparing tables cell by cell, bit for bit (test_api, test_api_pipeline, test_api_notebook)."""

from __future__ import annotations

import struct

import pyarrow as pa


def bits(v):
    """A cell with every float replaced by its 8 bytes (NaN payloads included)."""
    if isinstance(v, float):
        return struct.pack("<d", v)
    if isinstance(v, (list, tuple)):
        return [bits(x) for x in v]
    return v


def arrow_type(t):
    """A column type, list item names aside (Parquet names them "element", pyarrow "item")."""
    return ("list", arrow_type(t.value_type)) if pa.types.is_list(t) else t


def assert_same_table(got: pa.Table, want: pa.Table):
    """Same column names, types and row order; every value bit for bit."""
    want = want.replace_schema_metadata(None)
    assert got.column_names == want.column_names
    for name in got.column_names:
        a, b = got.column(name), want.column(name)
        assert arrow_type(a.type) == arrow_type(b.type), (name, a.type, b.type)
        assert [bits(x) for x in a.to_pylist()] == [bits(x) for x in b.to_pylist()], name
    assert got.num_rows == want.num_rows
