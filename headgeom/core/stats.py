"""Statistics helpers shared by the reports: AUROC, the hierarchical bootstrap, empirical p-values,
correlations, medians and percentile bands. scipy.stats computes what it serves as is (Spearman);
the functions kept here say why in their docstring: a NaN policy of their own (finite pairs only),
exact tie handling, a resampling scheme scipy.stats does not offer, or numpy's bits (Pearson)."""

from __future__ import annotations

from functools import partial

import numpy as np


def empirical_p(observed: float, samples, greater: bool = True) -> float:
    """Phipson & Smyth: p = (k+1)/(n+1), k = samples at least as extreme. Ties within
    rounding (1e-12 relative) count as at least as extreme: a statistic summed in another
    order must not look significant."""
    samples = np.asarray(samples, dtype=float)
    tol = 1e-12 * max(abs(observed), np.finfo(float).tiny)
    k = int(np.sum(samples >= observed - tol)) if greater else int(np.sum(samples <= observed + tol))
    return (k + 1) / (samples.size + 1)


def finite_stat(fn, x) -> float:
    """``fn`` over the finite values of x; NaN when none is left."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(fn(x)) if x.size else float("nan")


def median_of(rows, key: str) -> float:
    """The median of the rows' ``key`` values, a row without one counting as NaN (np.median: any NaN
    makes the median NaN, so a missing value shows, it is not passed over); NaN without rows."""
    vals = [r.get(key, np.nan) for r in rows]
    return float(np.median(vals)) if vals else float("nan")


def percentile_band(x, q=(5, 50, 95), axis=None) -> np.ndarray:
    """np.percentile of x at each q (linear interpolation), along ``axis``; NaN for every q when x
    is empty. NaNs in x are not skipped (a NaN makes the band NaN)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return np.full(len(q), np.nan)
    return np.percentile(x, q, axis=axis)


def finite_quantile(x, q) -> float:
    """The q-quantile of the finite values of x (NaN when there are none)."""
    return finite_stat(partial(np.quantile, q=q), x)


# the NaN-skipping reducers of the tables (NaN when nothing finite is left)
finite_median, finite_mean, finite_max, finite_min = (partial(finite_stat, f) for f in (np.median, np.mean, np.max, np.min))


def tie_groups(sorted_scores: np.ndarray) -> np.ndarray:
    """Group index of each value of a sorted array (equal values share one)."""
    g = np.zeros(sorted_scores.size, dtype=np.int64)
    if sorted_scores.size > 1:
        g[1:] = np.cumsum(sorted_scores[1:] != sorted_scores[:-1])
    return g


def auroc_sorted(groups: np.ndarray, pos, neg) -> float:
    """Kept here rather than scipy.stats.mannwhitneyu (U / (n_pos n_neg) is the same number): the
    threshold sweep scores many splits of one sorted array, and mannwhitneyu ranks afresh per call.
    The AUROC (Mann-Whitney) of the rows marked ``pos`` against those marked ``neg``, rows in
    sorted score order with tie groups ``groups`` (tie_groups): (sum over pos of #neg below +
    1/2 #neg tied) / (n_pos n_neg); NaN if a class is empty. Every count is a whole or half
    number, so the sum is exact in float64 and the value does not depend on the summation order.
    Sorting once serves many (pos, neg) splits of the same scores (the threshold sweep)."""
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if not n_pos or not n_neg:
        return float("nan")
    n_tied = np.bincount(groups[neg], minlength=int(groups[-1]) + 1).astype(float)
    below = np.cumsum(n_tied) - n_tied
    return float(np.sum(below[groups[pos]] + 0.5 * n_tied[groups[pos]]) / (n_pos * n_neg))


def auroc(pos, neg) -> float:
    """P(score_pos > score_neg) + 1/2 P(equal) (Mann-Whitney) over the finite scores; NaN if a
    class is empty. The one AUROC of the package: auroc_sorted on the scores sorted once."""
    pos = np.asarray(pos, dtype=float)
    neg = np.asarray(neg, dtype=float)
    pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
    scores = np.concatenate([pos, neg])
    order = np.argsort(scores, kind="stable")
    is_pos = (np.arange(scores.size) < pos.size)[order]
    return auroc_sorted(tie_groups(scores[order]), is_pos, ~is_pos)


def hierarchical_bootstrap(units, n_boot: int, rng: np.random.Generator, level_names=("model", "layer")):
    """Bootstrap of the mean layer gap with resampling at every level.

    ``units``: list (top level, e.g. models) of lists (layers) of (a, b) pairs of arrays (the
    strong and ordinary heads' values). Each replicate resamples top units, then layers within
    them, then heads within each group; the statistic is the mean over layers of mean(a) - mean(b).
    Returns (point estimate, 2.5%, 97.5%). Kept here: scipy.stats.bootstrap resamples observations
    of independent samples at one level only, and the intervals follow this draw order of ``rng``
    (a generator seeded by headgeom.core.seeds.rng_for), which the published intervals fix."""
    units = [[(np.asarray(a, float), np.asarray(b, float)) for a, b in lay if len(a) and len(b)] for lay in units]
    units = [u for u in units if u]
    if not units:
        return float("nan"), float("nan"), float("nan")
    point = float(np.mean([a.mean() - b.mean() for u in units for a, b in u]))
    stats = np.empty(n_boot)
    for k in range(n_boot):
        gaps = []
        for ui in rng.integers(0, len(units), len(units)):
            u = units[ui]
            for li in rng.integers(0, len(u), len(u)):
                a, b = u[li]
                gaps.append(a[rng.integers(0, a.size, a.size)].mean() - b[rng.integers(0, b.size, b.size)].mean())
        stats[k] = np.mean(gaps)
    lo, hi = np.quantile(stats, [0.025, 0.975]) if n_boot else (np.nan, np.nan)
    return point, float(lo), float(hi)


def cluster_bootstrap(stat, clusters, n_boot: int, rng: np.random.Generator):
    """Percentile interval of ``stat(index array)`` under two-level cluster resampling.

    ``clusters``: list (top level, e.g. models) of lists (e.g. layers) of integer index arrays
    (the rows of that layer). Each replicate resamples top clusters with replacement, then the
    layers within each drawn cluster with replacement, and keeps every row of a drawn layer (complete
    layers: the paper's model/layer-clustered inference). ``stat`` may return one number or a vector
    (several statistics from the same replicates). Returns (2.5%, 97.5%), each a float or an array;
    NaN where the statistic is undefined in every replicate or there are no rows. Kept here for the
    reasons hierarchical_bootstrap gives (two-level resampling; the draw order of ``rng``)."""
    clusters = [[np.asarray(x, dtype=np.int64) for x in c if len(x)] for c in clusters]
    clusters = [c for c in clusters if c]
    if not clusters or n_boot <= 0:
        return float("nan"), float("nan")
    vals = []
    for _ in range(n_boot):
        parts = []
        for ci in rng.integers(0, len(clusters), len(clusters)):
            c = clusters[ci]
            parts += [c[li] for li in rng.integers(0, len(c), len(c))]
        vals.append(np.atleast_1d(np.asarray(stat(np.concatenate(parts)), dtype=float)))
    vals = np.stack(vals)
    lo, hi = np.full(vals.shape[1], np.nan), np.full(vals.shape[1], np.nan)
    for k in range(vals.shape[1]):
        v = vals[:, k][np.isfinite(vals[:, k])]
        if v.size:
            lo[k], hi[k] = np.quantile(v, [0.025, 0.975])
    return (float(lo[0]), float(hi[0])) if vals.shape[1] == 1 else (lo, hi)


# ------------------------------------------------------------------ correlations, CCDFs, ranks, agreement


def finite_pairs(a, b) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) at the pairs where both values are finite; None with fewer than 3 such pairs, or when
    either side is then constant (no correlation is defined). The correlations' NaN policy, kept
    here: scipy's ``nan_policy="omit"`` leaves ±inf in and warns instead of answering NaN."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return None
    a, b = a[ok], b[ok]
    if np.all(a == a[0]) or np.all(b == b[0]):
        return None
    return a, b


def spearman(a, b) -> float:
    """Spearman's rank correlation (scipy.stats.spearmanr, ties at their mean rank) over the pairs
    where both values are finite; NaN with fewer than 3 such pairs or a constant side."""
    from scipy.stats import spearmanr

    pairs = finite_pairs(a, b)
    return np.nan if pairs is None else float(spearmanr(*pairs).statistic)


def pearson(a, b) -> float:
    """Pearson's correlation over the pairs where both values are finite; NaN with fewer than 3 such
    pairs or a constant side. np.corrcoef, not scipy.stats.pearsonr: the two agree to a few ulps
    (tests/unit/core/test_stats_summaries.py) but sum in another order, and np.corrcoef's bits are
    the ones the published read-path tables hold."""
    pairs = finite_pairs(a, b)
    return np.nan if pairs is None else float(np.corrcoef(*pairs)[0, 1])


def ccdf_on_grid(samples, grid: np.ndarray) -> np.ndarray:
    """Fraction of each sample's values >= every grid point: (samples, grid)."""
    out = np.empty((len(samples), grid.size))
    for k, s in enumerate(samples):
        s = np.sort(np.asarray(s, float))
        out[k] = 1.0 - np.searchsorted(s, grid, side="left") / s.size
    return out


def rank_within_groups(rows: list[dict], key: str, out: str, group: tuple, smallest_first: bool = False) -> None:
    """Set rows[i][out] to the rank of rows[i][key] among the rows sharing the ``group`` columns
    (1: the largest, or with ``smallest_first`` the smallest; a NaN value gets no rank, None); ties
    keep row order."""
    from headgeom.core.groupby import group_rows

    sign = 1.0 if smallest_first else -1.0
    for members in group_rows(rows, lambda r: tuple(r[g] for g in group)).values():
        for r in members:
            r[out] = None
        ranked = sorted((r for r in members if np.isfinite(r[key])), key=lambda r: sign * r[key])
        for k, r in enumerate(ranked, 1):
            r[out] = k


def agreeing_decimals(a: float, b: float, most: int = 10) -> int:
    """The most decimal places k ≤ most at which a and b round alike (round(a, k) == round(b, k) for
    every k up to it); -1 when they differ already at the units."""
    k = -1
    while k < most and round(float(a), k + 1) == round(float(b), k + 1):
        k += 1
    return k
