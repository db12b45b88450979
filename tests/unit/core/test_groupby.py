"""headgeom.core.groupby: row groups against a plain Python loop over the rows."""

import numpy as np
from hypothesis import given, settings, strategies as st

from headgeom.core.groupby import group_rows, row_groups


def _loop(cols, keys):
    out = {}
    for i in range(len(cols[keys[0]])):
        k = tuple(v.item() if hasattr(v, "item") else v for v in (cols[c][i] for c in keys))
        out.setdefault(k, []).append(i)
    return {k: np.asarray(v) for k, v in out.items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 4), st.integers(-2, 2)),
                min_size=1, max_size=60))
def test_row_groups_match_a_loop(rows):
    cols = {"model": np.array([r[0] for r in rows]), "layer": np.array([r[1] for r in rows]),
            "x": np.array([r[2] for r in rows], float)}
    got, want = row_groups(cols, ("model", "layer")), _loop(cols, ("model", "layer"))
    assert list(got) == list(want)  # first-appearance order
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert all(isinstance(k[0], str) and isinstance(k[1], int) for k in got)


def test_empty_family_has_no_groups():
    assert row_groups({}, ("model",)) == {}
    assert row_groups({"model": np.array([], dtype=str)}, ("model",)) == {}


def test_group_rows_keeps_order():
    rows = [{"g": 2, "v": 0}, {"g": 1, "v": 1}, {"g": 2, "v": 2}]
    assert group_rows(rows, lambda r: r["g"]) == {2: [rows[0], rows[2]], 1: [rows[1]]}
