"""The null jobs' draws take orthonormal_bases' Cholesky first pass (first_pass="cholesky"), and their
statistics equal those of the eigenvector route (what every other basis takes) to 1e-12 relative: each
draw's spaces are the same, only the basis within each space differs, and no statistic depends on it."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.io.shards import read_shard
from headgeom.methods import overlap

QUIET = {"log": lambda *_: None}
BASE = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"],
        "kinds": ["O", "Q", "K", "V"], "precision": "float64"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from headgeom.io.fetch import fetch_model
    from synth import write_llama

    tmp = tmp_path_factory.mktemp("null_bases_route")
    write_llama(tmp / "ck", n_layers=3, d_model=40, d_head=12, n_heads=4, n_kv=2)
    fetch_model("tiny", {"source": "local", "path": str(tmp / "ck")}, tmp / "store", **QUIET)
    return tmp / "store"


def _floats(cols: dict) -> dict:
    """Every float column (lists of ρ flattened), by name."""
    out = {}
    for k, v in cols.items():
        if v and isinstance(v[0], list):
            v = [x for row in v for x in row]
        if v and isinstance(v[0], float):
            out[k] = np.array(v, dtype=float)
    return out


def _run(job, store, out, monkeypatch, route: str):
    """Run ``job`` with the draws' bases forced onto one route; returns (columns, Cholesky first passes taken)."""
    real = overlap._cholesky_qr2
    taken = []

    def spy(*a, **k):
        Q = real(*a, **k) if route == "cholesky" else None  # None: the eigenvector route runs
        taken.append(Q is not None)
        return Q

    monkeypatch.setattr(overlap, "_cholesky_qr2", spy)
    job(out)
    monkeypatch.undo()
    return read_shard(out)[0].to_pydict(), taken


@pytest.mark.parametrize("which", ["within", "cross"])
def test_null_draws_take_the_cholesky_first_pass_with_the_eigenvector_routes_statistics(store, tmp_path, monkeypatch,
                                                                                         which):
    from headgeom.jobs.pk_paper import pk_null_cross_job, pk_null_within_job

    def job(out):
        if which == "within":
            pk_null_within_job(store, 1, [0, 1, 2], out, BASE, **QUIET)
        else:
            pk_null_cross_job(store, [0, 1], out, BASE, **QUIET)

    fast, taken = _run(job, store, tmp_path / "fast.parquet", monkeypatch, "cholesky")
    slow, _ = _run(job, store, tmp_path / "slow.parquet", monkeypatch, "eigh")
    assert taken and all(taken)  # every draw of these full-rank heads took the Cholesky first pass
    a, b = _floats(fast), _floats(slow)
    assert a.keys() == b.keys() and ("rho" in a or "mean" in a)
    for k in a:
        assert a[k].shape == b[k].shape and np.array_equal(np.isnan(a[k]), np.isnan(b[k])), k
        ok = np.isfinite(b[k])
        np.testing.assert_allclose(a[k][ok], b[k][ok], rtol=1e-12, atol=1e-14, err_msg=k)
    assert any(not np.array_equal(a[k], b[k]) for k in a)  # two routes really ran (not the same bits twice)
    assert {k: v for k, v in fast.items() if k not in a} == {k: v for k, v in slow.items() if k not in a}


def test_the_cholesky_first_pass_falls_back_to_the_eigenvector_route_bit_for_bit():
    """A batch with a rank-deficient head, a non-finite head, or (float32) a head past
    CHOLESKY_FIRST_PASS_COND32 takes the eigenvector route: the same bits and ranks as first_pass="eigh"."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3, 30, 6))
    deficient = X.copy()
    deficient[1][:, 5] = deficient[1][:, 0] + deficient[1][:, 2]
    nonfinite = X.copy()
    nonfinite[2][0, 0] = np.nan
    U, _, Vt = np.linalg.svd(rng.standard_normal((3, 30, 6)), full_matrices=False)
    ill32 = ((U * np.logspace(0, -3, 6)) @ Vt).astype(np.float32)  # cond 1e3 > CHOLESKY_FIRST_PASS_COND32
    for Xb in (deficient, nonfinite, ill32):
        Qe, re = overlap.orthonormal_bases(Xb, first_pass="eigh")
        Qc, rc = overlap.orthonormal_bases(Xb, first_pass="cholesky")
        assert np.array_equal(Qe, Qc, equal_nan=True) and np.array_equal(re, rc)
    # and a well-conditioned float32 batch takes the Cholesky route (another basis, the same spaces)
    ok32 = X.astype(np.float32)
    Qc, rc = overlap.orthonormal_bases(ok32, first_pass="cholesky")
    Qe, _ = overlap.orthonormal_bases(ok32, first_pass="eigh")
    assert rc.tolist() == [6, 6, 6] and not np.array_equal(Qc, Qe)
    np.testing.assert_allclose(Qc @ np.swapaxes(Qc, -1, -2), Qe @ np.swapaxes(Qe, -1, -2), atol=2e-6)
    with pytest.raises(ValueError, match="first_pass"):
        overlap.orthonormal_bases(X, first_pass="qr")


@pytest.mark.parametrize("cond,eigenvalues", [(1.0e1, False), (1.0e5, False), (5.0e5, True)])
def test_the_cholesky_first_pass_is_the_q_factor_of_the_heads_qr(cond, eigenvalues, monkeypatch):
    """CholeskyQR2 gives X = Q R with R upper triangular with a positive diagonal (R = L2^T L1^T), i.e. the
    Q of the heads' Householder QR with its signs fixed: so, up to cond(X) near 1/rank_rtol, no fallback.
    Full rank is certified by ||L||_F ||L^-1||_F < 1/rank_rtol (about sqrt(d - 1) cond(X) for these spectra,
    seven singular values 1 and one 1/cond) without eigenvalues; past that bound (cond 5e5) the Gram's
    eigenvalues decide."""
    rng = np.random.default_rng(int(cond))
    D, d = 60, 8
    U, _, Vt = np.linalg.svd(rng.standard_normal((3, D, d)), full_matrices=False)
    X = (U * np.r_[np.ones(d - 1), 1 / cond]) @ Vt
    calls = []
    real = np.linalg.eigvalsh
    monkeypatch.setattr(np.linalg, "eigvalsh", lambda G: calls.append(1) or real(G))
    Q = overlap._cholesky_qr2(X, np.swapaxes(X, -1, -2) @ X, 1e-6, overlap.NUMPY)
    monkeypatch.undo()
    assert Q is not None and bool(calls) == eigenvalues
    Qh, R = np.linalg.qr(X)
    Qh = Qh * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[:, None, :]
    np.testing.assert_allclose(Q, Qh, atol=1e-15 * cond**2 + 1e-12)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("null", ["rotation", "reassign"])
def test_a_draws_bases_are_computed_in_its_own_memory_with_the_same_bits(null, precision, monkeypatch):
    """null_spaces hands orthonormal_bases its draw to overwrite: both Cholesky passes' triangular products run
    as BLAS trmm on the draw where it lies. The bases are in the draw's memory, bit for bit those of the
    GEMM products on a copy, and the job's X is left as it was."""
    from headgeom.core.seeds import rng_for
    from headgeom.methods.nulls import null_factors, null_spaces

    rng = np.random.default_rng(11)
    X = overlap.stacked_heads(rng.standard_normal((5, 48, 8)))
    X_before = X.copy()
    draw = null_factors(X, null, rng_for("t", null), precision)
    want, want_r = overlap.orthonormal_bases(draw.copy(), first_pass="cholesky")  # a copy: not in place
    assert overlap._stacked_in_place(draw.copy()) is None
    from headgeom.core import lapack

    real, written = lapack.trmm_heads, []
    monkeypatch.setattr(lapack, "trmm_heads", lambda S, L: written.append(S) or real(S, L))
    B, r = null_spaces(X, null, rng_for("t", null), precision)
    # both passes wrote into one stacked array, whose heads the bases are
    assert len(written) == 2 and written[0] is written[1] and np.shares_memory(B, written[0])
    assert np.array_equal(B, want) and np.array_equal(r, want_r) and B.dtype == want.dtype
    assert np.array_equal(X, X_before)


def test_a_draw_that_shares_the_jobs_memory_is_not_overwritten(monkeypatch):
    from headgeom.core.seeds import rng_for
    from headgeom.methods import nulls

    monkeypatch.setitem(nulls.NULL_MODELS, "same", nulls.NullModel("same", lambda S, rng: S, "same"))
    X = overlap.stacked_heads(np.random.default_rng(2).standard_normal((3, 30, 5)))
    X_before = X.copy()
    B, r = nulls.null_spaces(X, "same", rng_for("t"))
    assert np.array_equal(X, X_before) and r.tolist() == [5, 5, 5]
    np.testing.assert_allclose(np.swapaxes(B, -1, -2) @ B, np.broadcast_to(np.eye(5), (3, 5, 5)), atol=1e-14)


def test_a_failed_second_pass_in_place_gives_the_eigenvector_routes_bases(monkeypatch):
    """Should the second pass's Cholesky fail after the first pass overwrote the draw, the draw is restored
    (X = Q1 L1^T, to rounding) and the eigenvector route runs on it."""
    rng = np.random.default_rng(4)
    S = rng.standard_normal((40, 3 * 6))
    want, want_r = overlap.orthonormal_bases(overlap.heads_of(S.copy(), 3), first_pass="eigh")
    real, calls = np.linalg.cholesky, []

    def cholesky(G):
        calls.append(1)
        if len(calls) == 2:  # the second pass's
            raise np.linalg.LinAlgError("forced")
        return real(G)

    monkeypatch.setattr(np.linalg, "cholesky", cholesky)
    X = overlap.heads_of(S, 3)
    B, r = overlap.orthonormal_bases(X, first_pass="cholesky", overwrite_x=True)
    monkeypatch.undo()
    assert len(calls) >= 2 and np.array_equal(r, want_r)
    np.testing.assert_allclose(B, want, atol=1e-13)
