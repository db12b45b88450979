"""The read paths' statistics (headgeom.methods.read_paths: layer_pair_spearman, positive_share_ratio,
read_path_summary) against independent computations: per-pair boolean masks instead of the grouped
sort, Spearman as Pearson's formula on mean ranks counted by hand, quantiles by linear interpolation
between order statistics written out, sums and counts in plain Python; data with ties, NaN and
infinite ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headgeom.methods.read_paths import layer_pair_spearman, positive_share_ratio, read_path_summary


def _mean_ranks(x):
    return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])


def _pearson(x, y):
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / math.sqrt((x * x).sum() * (y * y).sum()))


def _spearman(a, b):
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return _pearson(_mean_ranks(a), _mean_ranks(b))


def _quantile(x, q):
    x = sorted(v for v in x if math.isfinite(v))
    if not x:
        return float("nan")
    pos = q * (len(x) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (pos - lo) * (x[hi] - x[lo])


def _columns(n=240, seed=7):
    rng = np.random.default_rng(seed)
    wl = rng.integers(0, 4, n)
    rl = wl + rng.integers(1, 3, n)
    rho = np.round(rng.random(n), 1) + 0.05  # rounded: many ties
    share = np.round(rho * rng.uniform(0.5, 1.5, n), 2)
    share[[4, 17]] = np.nan
    share[9] = 0.0  # a zero ratio: off a log axis
    rho[[30]] = np.inf
    lin = rng.random(n) + 0.1
    nrm = 0.2 * rng.random(n)
    tot = lin + nrm - 0.05
    cross = rng.standard_normal(n)
    comp = np.round(rng.random(n), 1)
    return {"rho": rho, "share": share, "e_lin": lin, "e_norm": nrm, "e_tot": tot, "e_cross": cross,
            "ratio_lin_tot": lin / tot, "rel_rms": np.sqrt(nrm / tot), "composition": comp,
            "writer_layer": wl, "reader_layer": rl}


def test_layer_pair_spearman_equals_the_per_pair_masks():
    c = _columns()
    got = layer_pair_spearman(c["share"], c["rho"], c["writer_layer"], c["reader_layer"])
    pairs = sorted(set(zip(c["writer_layer"].tolist(), c["reader_layer"].tolist())))
    want = [_spearman(c["share"][m], c["rho"][m])
            for m in ((c["writer_layer"] == a) & (c["reader_layer"] == b) for a, b in pairs)]
    assert len(got) == len(pairs) == 8
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # a pair with two rows has no correlation
    two = layer_pair_spearman(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([1.0, 3.0, 2.0, 5.0, 4.0]),
                              np.array([0, 0, 0, 1, 1]), np.array([1, 1, 1, 2, 2]))
    assert two[0] == pytest.approx(0.5) and np.isnan(two[1])


def test_positive_share_ratio_keeps_the_finite_positive_ratios():
    share = np.array([0.2, np.nan, 0.0, 0.3, 0.5, 0.1])
    rho = np.array([0.1, 0.5, 0.4, np.inf, 0.0, 0.2])
    assert positive_share_ratio(share, rho).tolist() == [2.0, 0.5]  # rows 0 and 5


def test_read_path_summary_against_formulas_written_out():
    c = _columns()
    s = np.zeros(c["rho"].size, bool)
    s[::2] = True
    s[[4, 30]] = True  # a NaN share and an infinite rho inside the selection
    got = read_path_summary(c, s)
    sub = {k: v[s] for k, v in c.items()}
    rho, share, lin = sub["rho"], sub["share"], sub["e_lin"]
    ratio = [a / b for a, b in zip(share, rho)]
    pairs = sorted(set(zip(sub["writer_layer"].tolist(), sub["reader_layer"].tolist())))
    per_pair = [_spearman(share[m], rho[m])
                for m in ((sub["writer_layer"] == a) & (sub["reader_layer"] == b) for a, b in pairs)]
    want = {
        "ratio_lin_tot_med": _quantile(sub["ratio_lin_tot"], 0.5), "ratio_lin_tot_p05": _quantile(sub["ratio_lin_tot"], 0.05),
        "ratio_lin_tot_p95": _quantile(sub["ratio_lin_tot"], 0.95), "rel_rms_med": _quantile(sub["rel_rms"], 0.5),
        "norm_over_lin_total": sum(sub["e_norm"]) / sum(lin),
        "norm_over_lin_med": _quantile(sub["e_norm"] / lin, 0.5),
        "tot_over_lin_total": sum(sub["e_tot"]) / sum(lin),
        "cross_positive": sum(1 for v in sub["e_cross"] if v > 0),
        "share_rho_spearman": _spearman(share, rho),
        "share_rho_pearson": _pearson(*(x[np.isfinite(share) & np.isfinite(rho)] for x in (share, rho))),
        "share_rho_ratio_med": _quantile(ratio, 0.5), "share_rho_ratio_p05": _quantile(ratio, 0.05),
        "share_rho_ratio_p95": _quantile(ratio, 0.95), "lin_rho_spearman": _spearman(lin, rho),
        "layer_pairs": len(pairs), "layer_pair_spearman_med": _quantile(per_pair, 0.5),
        "layer_pairs_negative": sum(1 for v in per_pair if v < 0),
        "composition_rho_spearman": _spearman(sub["composition"], rho),
        "composition_rho_pearson": _pearson(*(x[np.isfinite(rho)] for x in (sub["composition"], rho))),
    }
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k
    assert all(math.isfinite(v) for v in got.values())
