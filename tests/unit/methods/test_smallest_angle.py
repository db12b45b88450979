"""The smallest principal angle of a null draw without every pair's eigenvalues (overlap.sigma_max_largest,
pk_within(angles="min")): the blocks certified below the largest sigma_max by a Cholesky factorization
(lapack.positive_definite), the others computed as sigma_max computes them; checked against full SVDs and
sigma_max's own bits."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.core import lapack
from headgeom.methods import overlap


def _blocks(rng, n, d, D=None):
    """n blocks U_i^T U_j of random orthonormal d-frames in R^D (D = 4 d): principal-angle cosines."""
    D = D or 4 * d
    U = np.linalg.qr(rng.standard_normal((2 * n, D, d)))[0]
    return np.swapaxes(U[:n], -1, -2) @ U[n:]


@pytest.mark.parametrize("d", [2, 7, 64])
def test_shifted_positive_definite_against_the_eigenvalues(d):
    """mu I - G is certified positive definite exactly where G's top eigenvalue is below mu (here 1e-6 of mu
    away either way, far beyond the factorization's rounding), and G is left as it is."""
    rng = np.random.default_rng(d)
    Q = np.linalg.qr(rng.standard_normal((6, d, d)))[0]
    lam = rng.uniform(0.1, 0.9, (6, d))
    lam[1, 0], lam[2, -1], lam[3, 0], lam[4, 0] = 1 + 1e-6, 1 - 1e-6, 5.0, 1.0
    G = (Q * lam[:, None, :]) @ np.swapaxes(Q, -1, -2)
    G = (G + np.swapaxes(G, -1, -2)) / 2
    G_before = G.copy()
    got = lapack.shifted_positive_definite(G, 1.0, [0, 1, 2, 3, 5])
    assert got.tolist() == [True, False, True, False, True]
    assert np.array_equal(G, G_before)
    assert lapack.shifted_positive_definite(G, 1.0, []).shape == (0,)
    with pytest.raises(ValueError, match="symmetric"):
        lapack.shifted_positive_definite(G[0], 1.0, [0])


@pytest.mark.parametrize("n,d", [(6, 8), (60, 16), (378, 12)])
def test_the_largest_sigma_max_is_sigma_max_s_and_the_others_are_certified_below_it(n, d):
    rng = np.random.default_rng(n + d)
    C = _blocks(rng, n, d)
    m = int(np.argmax(overlap.sigma_max(C)))
    tie, near = (m + 1) % n, (m + 2) % n
    C[tie] = C[m]  # an exact tie with the largest
    C[near] = C[m] * (1 - 1e-13)  # a block within rounding of it: no certificate can put it below
    full = overlap.sigma_max(C)
    got = overlap.sigma_max_largest(C)
    kept = np.isfinite(got)
    assert np.array_equal(got[kept], full[kept])  # computed as sigma_max computes them
    assert np.nanmax(got) == full.max()
    svd = np.linalg.svd(C, compute_uv=False)[:, 0]  # independent: every block's largest singular value
    np.testing.assert_allclose(full, svd, rtol=1e-13)
    top = svd.max()
    assert np.all(svd[~kept] < top * (1 - overlap.LARGEST_MARGIN / 4))  # pruned only where certified below
    assert kept[np.argmax(full)] and kept.sum() < n  # the maximum kept, and not everything computed
    assert kept[m] and kept[tie] and kept[near]
    # a block that is the largest by far but ranked low by its trace: still found (the certificate fails for it)
    C2 = C.copy()
    C2[5] = np.diag(np.r_[0.999, np.full(d - 1, 1e-3)])
    got2 = overlap.sigma_max_largest(C2)
    assert np.nanmax(got2) == overlap.sigma_max(C2).max() == overlap.sigma_max(C2)[5]


def test_skipped_blocks_and_degenerate_input():
    rng = np.random.default_rng(1)
    C = _blocks(rng, 10, 6)
    skip = np.zeros(10, bool)
    skip[np.argmax(overlap.sigma_max(C))] = True
    got = overlap.sigma_max_largest(C, skip=skip)
    assert np.isnan(got[skip]).all()
    assert np.nanmax(got) == overlap.sigma_max(C)[~skip].max()
    assert overlap.sigma_max_largest(C, skip=np.ones(10, bool)) is None
    assert overlap.sigma_max_largest(np.zeros((4, 3, 3))) is None
    bad = C.copy()
    bad[2, 0, 0] = np.nan
    assert overlap.sigma_max_largest(bad) is None


@pytest.mark.parametrize("near", [False, True])
def test_pk_within_min_angles_give_the_same_smallest_angle_bit_for_bit(near):
    """angles="min": the same pk, rho, ranks and flags, the same smallest angle; with a pair near the sine
    form's range (here under 1 degree) every pair's angle, as angles="all"."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((9, 40, 5))
    if near:
        X[4] = X[1] + 1e-3 * rng.standard_normal((40, 5))
    B, r = overlap.orthonormal_bases(X)
    a, b = overlap.pk_within(B, r), overlap.pk_within(B, r, angles="min")
    for k in a:
        if k != "min_angle_deg":
            assert np.array_equal(a[k], b[k]), k
    assert np.nanmin(b["min_angle_deg"]) == np.nanmin(a["min_angle_deg"])
    finite = np.isfinite(b["min_angle_deg"])
    assert np.array_equal(b["min_angle_deg"][finite], a["min_angle_deg"][finite])
    assert finite.all() == near
    with pytest.raises(ValueError, match="angles"):
        overlap.pk_within(B, r, angles="some")


def test_the_within_null_job_takes_the_smallest_angle_alone_with_the_same_shard(tmp_path, monkeypatch):
    from headgeom.io.fetch import fetch_model
    from headgeom.io.shards import read_shard
    from headgeom.jobs.pk_paper import pk_null_within_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=2, d_model=48, d_head=8, n_heads=6, n_kv=3)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    params = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "kinds": ["O", "Q", "K", "V"],
              "precision": "float64"}
    calls = []
    real = overlap.sigma_max_largest
    monkeypatch.setattr(overlap, "sigma_max_largest", lambda *a, **k: calls.append(1) or real(*a, **k))
    pk_null_within_job(tmp_path / "store", 1, [0, 1], tmp_path / "min.parquet", params, log=lambda *_: None)
    monkeypatch.setattr(overlap, "sigma_max_largest", lambda *a, **k: None)  # every pair's angle
    pk_null_within_job(tmp_path / "store", 1, [0, 1], tmp_path / "all.parquet", params, log=lambda *_: None)
    assert calls
    a, b = read_shard(tmp_path / "min.parquet")[0], read_shard(tmp_path / "all.parquet")[0]
    assert a.to_pydict() == b.to_pydict()
