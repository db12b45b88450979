"""The summaries headgeom.core.stats gives the output modules (correlations over finite pairs, the
CCDF on a grid, ranks within groups, agreeing decimals) against independent computations: ranks by
double argsort, Pearson's formula written out, explicit counts, and hand-worked expectations."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.core import stats as S


def _pearson_by_formula(x, y):
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))


def _ranks(x):
    """Ranks 0..n-1 (no ties in the data used here)."""
    r = np.empty(x.size)
    r[np.argsort(x)] = np.arange(x.size)
    return r


def _with_nans(rng, n=40):
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    b = b + 0.7 * a ** 3  # monotone-ish: Spearman and Pearson differ
    a[[3, 11]] = np.nan
    b[[5, 11, 20]] = np.inf
    return a, b


def test_spearman_and_pearson_over_the_finite_pairs():
    a, b = _with_nans(np.random.default_rng(0))
    ok = np.isfinite(a) & np.isfinite(b)
    assert ok.sum() == 36  # rows 3, 5, 11, 20 left out
    assert S.spearman(a, b) == pytest.approx(_pearson_by_formula(_ranks(a[ok]), _ranks(b[ok])), abs=1e-12)
    assert S.pearson(a, b) == pytest.approx(_pearson_by_formula(a[ok], b[ok]), abs=1e-12)
    assert S.spearman(a, b) != pytest.approx(S.pearson(a, b), abs=1e-3)


@pytest.mark.parametrize("corr", [S.spearman, S.pearson])
def test_correlations_need_three_finite_pairs(corr):
    x = np.array([1.0, 2.0, np.nan, 4.0])
    y = np.array([2.0, 1.0, 3.0, np.nan])
    assert np.isnan(corr(x, y))  # two finite pairs
    x3, y3 = np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])
    assert corr(x3, y3) == pytest.approx(0.5)  # both: ranks equal the values here


def test_ccdf_on_grid_is_the_fraction_at_least_each_point():
    rng = np.random.default_rng(1)
    samples = [rng.random(7), rng.random(12), np.array([0.2, 0.2, 0.5])]
    grid = np.concatenate([np.linspace(-0.1, 1.1, 25), [0.2, 0.5]])  # grid points on sample values too
    got = S.ccdf_on_grid(samples, grid)
    want = np.array([[np.mean(s >= g) for g in grid] for s in samples])
    assert got.shape == (3, grid.size)
    assert np.allclose(got, want, rtol=0, atol=1e-15)


def test_rank_within_groups_ranks_each_group_apart():
    rows = [{"g": "a", "v": 0.3}, {"g": "b", "v": 5.0}, {"g": "a", "v": 0.9}, {"g": "a", "v": np.nan},
            {"g": "b", "v": 1.0}, {"g": "a", "v": 0.3}]
    S.rank_within_groups(rows, "v", "largest", ("g",))
    assert [r["largest"] for r in rows] == [2, 1, 1, None, 2, 3]  # tie at 0.3: row order
    S.rank_within_groups(rows, "v", "smallest", ("g",), smallest_first=True)
    assert [r["smallest"] for r in rows] == [1, 2, 3, None, 1, 2]


@pytest.mark.parametrize("a,b,k", [(0.1231, 0.1239, 2), (1.0, 1.0, 10), (0.4, 1.4, -1), (2.0, 2.3, 0)])
def test_agreeing_decimals(a, b, k):
    assert S.agreeing_decimals(a, b) == k
