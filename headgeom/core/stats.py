"""Statistics helpers shared by the reports: AUROC, the hierarchical bootstrap, empirical p-values."""

from __future__ import annotations

import numpy as np


def empirical_p(observed: float, samples, greater: bool = True) -> float:
    """Phipson & Smyth: p = (k+1)/(n+1), k = samples at least as extreme. Ties within
    rounding (1e-12 relative) count as at least as extreme: a statistic summed in another
    order must not look significant."""
    samples = np.asarray(samples, dtype=float)
    tol = 1e-12 * max(abs(observed), np.finfo(float).tiny)
    k = int(np.sum(samples >= observed - tol)) if greater else int(np.sum(samples <= observed + tol))
    return (k + 1) / (samples.size + 1)


def auroc(pos, neg) -> float:
    """P(score_pos > score_neg) + 1/2 P(equal) (Mann-Whitney); NaN if a class is empty."""
    from scipy.stats import rankdata

    pos = np.asarray(pos, dtype=float)
    neg = np.asarray(neg, dtype=float)
    pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    r = rankdata(np.concatenate([pos, neg]))
    return float((r[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def hierarchical_bootstrap(units, n_boot: int, rng: np.random.Generator, level_names=("model", "layer")):
    """Bootstrap of the mean layer gap with resampling at every level.

    ``units``: list (top level, e.g. models) of lists (layers) of (a, b) pairs of arrays (the
    strong and ordinary heads' values). Each replicate resamples top units, then layers within
    them, then heads within each group; the statistic is the mean over layers of mean(a) - mean(b).
    Returns (point estimate, 2.5%, 97.5%)."""
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
    NaN where the statistic is undefined in every replicate or there are no rows."""
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


def spearman(a, b) -> float:
    """Spearman's rank correlation (scipy) over the pairs where both values are finite; NaN with
    fewer than 3 such pairs."""
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return np.nan
    return float(spearmanr(a[ok], b[ok]).statistic)


def pearson(a, b) -> float:
    """Pearson's correlation over the pairs where both values are finite; NaN with fewer than 3."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return np.nan
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


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
