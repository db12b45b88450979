"""The summaries headgeom.core.stats gives the output modules (correlations over finite pairs, the
CCDF on a grid, ranks within groups, agreeing decimals, medians of rows, percentile bands) against
independent computations: ranks by double argsort, mean ranks of ties counted by hand, Pearson's
formula written out, explicit counts, linear interpolation between order statistics written out,
and hand-worked expectations."""

from __future__ import annotations

import warnings

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


def _mean_ranks(x):
    """Ranks 1..n, tied values at the mean of the ranks they share (counted pair by pair)."""
    x = np.asarray(x, float)
    return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])


def test_spearman_gives_tied_values_their_mean_rank():
    a = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.5])
    b = np.array([2.0, 1.0, 4.0, 4.0, 3.0, 7.0, 6.0, 0.0])
    assert _mean_ranks(a).tolist() == [2.0, 3.5, 3.5, 5.0, 7.0, 7.0, 7.0, 1.0]  # by hand
    want = _pearson_by_formula(_mean_ranks(a), _mean_ranks(b))
    assert S.spearman(a, b) == pytest.approx(want, rel=1e-12)
    # tied ranks are not the first-come ranks of an argsort: the two differ here
    assert abs(want - _pearson_by_formula(_ranks(a), _ranks(b))) > 1e-3


@pytest.mark.parametrize("corr", [S.spearman, S.pearson])
def test_a_constant_side_gives_nan_without_a_warning(corr):
    x = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    y = np.array([2.0, 2.0, 2.0, 2.0, 9.0])  # constant over the finite pairs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(corr(x, y)) and np.isnan(corr(y, x))
        assert np.isfinite(corr(x, np.array([2.0, 2.0, 2.0, 2.5, 9.0])))


def test_pearson_is_within_rounding_of_the_formula_and_of_scipy_on_large_inputs():
    """np.corrcoef, the formula and scipy.stats.pearsonr each sum in their own order: the value agrees
    with both to rounding (a few ulps), not bit for bit."""
    from scipy.stats import pearsonr

    rng = np.random.default_rng(3)
    a = rng.random(50_000)
    b = 0.3 * a + rng.random(50_000)
    # abs=0: pytest.approx would otherwise also accept any difference under 1e-12
    assert S.pearson(a, b) == pytest.approx(_pearson_by_formula(a, b), rel=1e-12, abs=0)
    assert S.pearson(a, b) == pytest.approx(float(pearsonr(a, b).statistic), rel=1e-14, abs=0)


def test_median_of_rows_counts_a_missing_value_as_nan():
    rows = [{"r": 3.0}, {"r": 1.0}, {"r": 10.0}, {"r": 2.0}]
    assert S.median_of(rows, "r") == 2.5  # (2 + 3) / 2
    assert S.median_of(rows[:3], "r") == 3.0
    assert np.isnan(S.median_of(rows + [{}], "r"))
    assert np.isnan(S.median_of(rows + [{"r": np.nan}], "r"))
    assert np.isnan(S.median_of([], "r"))


def _percentile_by_hand(x, q):
    """Linear interpolation between the order statistics at position q/100 (n - 1)."""
    x = sorted(x)
    pos = q / 100 * (len(x) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (pos - lo) * (x[hi] - x[lo])


def test_percentile_band_interpolates_between_order_statistics():
    x = [40.0, 0.0, 30.0, 10.0, 20.0]
    assert S.percentile_band(x).tolist() == pytest.approx([2.0, 20.0, 38.0])  # 0.05 * 4 = 0.2 of the way to 10
    rng = np.random.default_rng(4)
    y = rng.random(37)
    got = S.percentile_band(y, (5, 25, 95))
    assert got.tolist() == pytest.approx([_percentile_by_hand(y, q) for q in (5, 25, 95)], rel=1e-12)
    M = np.array([[0.0, 5.0], [1.0, 7.0], [2.0, 6.0]])  # along axis 0: per column
    assert S.percentile_band(M, (50, 100), axis=0).tolist() == [[1.0, 6.0], [2.0, 7.0]]
    assert np.isnan(S.percentile_band([], (5, 95))).all() and S.percentile_band([], (5, 95)).shape == (2,)
    assert np.isnan(S.percentile_band([1.0, np.nan, 3.0], (50,))).all()  # a NaN is not skipped
