"""Cross-layer null pairs from packed projectors (methods.pk.packed_projectors / projector_pk)
against independent computations: principal angles (scipy: PK = sum cos^2), explicit D x D
projector traces, and the stacked-basis blocks path, in the kernels and through the job."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from headgeom.io.shards import read_shard
from headgeom.methods import pk


def _bases(n, D, d, seed, drop=()):
    """n orthonormal bases of random d-dim subspaces; heads in ``drop`` lose their last column
    (rank d - 1) the way orthonormal_bases leaves a rank-deficient head."""
    X = np.random.default_rng(seed).standard_normal((n, D, d))
    for h in drop:
        X[h, :, -1] = X[h, :, 0]  # rank d - 1
    return pk.orthonormal_bases(X)


@pytest.mark.parametrize("D,d,nw,nr", [(24, 5, 3, 4), (40, 8, 2, 5), (17, 3, 4, 1)])
def test_projector_pk_is_the_sum_of_squared_principal_cosines(D, d, nw, nr):
    Bw, rw = _bases(nw, D, d, 1, drop=(0,))
    Br, rr = _bases(nr, D, d, 2)
    got = pk.projector_pk(pk.packed_projectors(Bw, twice_upper=True), pk.packed_projectors(Br))
    assert rw[0] == d - 1
    for i in range(nw):
        for j in range(nr):
            U, V = Bw[i][:, :rw[i]], Br[j][:, :rr[j]]
            want = np.sum(np.cos(subspace_angles(U, V)) ** 2)
            explicit = np.trace((U @ U.T) @ (V @ V.T))
            assert got[i, j] == pytest.approx(want, rel=1e-12, abs=1e-13)
            assert got[i, j] == pytest.approx(explicit, rel=1e-12, abs=1e-13)


def test_packing_without_twice_upper_is_the_plain_triangle():
    B, _ = _bases(2, 9, 3, 4)
    P = pk.packed_projectors(B)
    P2 = pk.packed_projectors(B, twice_upper=True)
    full = B[1] @ B[1].T
    iu = np.triu_indices(9, 1)
    np.testing.assert_allclose(P[1, :9], np.diag(full), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(P[1, 9:], full[iu], rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(P2[:, :9], P[:, :9])
    np.testing.assert_array_equal(P2[:, 9:], 2 * P[:, 9:])


def test_cross_rho_projectors_equals_the_blocks_path_with_nan_heads():
    X = np.random.default_rng(3).standard_normal((4, 30, 6))
    X[2, 0, 0] = np.nan  # non-finite head: rank -1, its pairs NaN
    Bw, rw = pk.orthonormal_bases(X)
    Br, rr = _bases(3, 30, 6, 5, drop=(1,))
    blocks = pk.cross_pairs(Bw, rw, Br, rr, angles=False)["rho"]
    proj = pk.cross_rho_projectors(pk.packed_projectors(Bw, twice_upper=True), rw, pk.packed_projectors(Br), rr)
    assert proj.shape == (4, 3)
    proj = proj.ravel()
    np.testing.assert_array_equal(np.isnan(proj), np.isnan(blocks))
    assert np.isnan(proj.reshape(4, 3)[2]).all() and np.isfinite(proj.reshape(4, 3)[[0, 1, 3]]).all()
    ok = np.isfinite(blocks)
    np.testing.assert_allclose(proj[ok], blocks[ok], rtol=1e-12)


def test_projectors_pay_by_shape():
    assert pk.projectors_pay(9, 576, 64, 30)  # SmolLM2-135M
    assert pk.projectors_pay(4, 640, 256, 18)  # Gemma-3-270M
    assert not pk.projectors_pay(12, 384, 32, 6)  # MiniLM-L6: six layers share a packing too little
    assert not pk.projectors_pay(28, 3584, 128, 28)  # Qwen2.5-7B: 1.4 GB of packed projectors a layer
    assert not pk.projectors_pay(12, 768, 16, 12)  # D d^2 below D^2 / 2: blocks are cheaper per pair
    assert not pk.projectors_pay(9, 576, 64, 1)  # no pairs
    # the rule's edge: blocks D d^2 at half rate against D (D + 1) / 2 + 4 D^2 d / ((L - 1) H)
    D, d, H = 576, 64, 9
    edge = next(L for L in range(2, 200) if 0.5 * D * d * d > D * (D + 1) / 2 + 4 * D * D * d / ((L - 1) * H))
    assert not pk.projectors_pay(H, D, d, edge - 1) and pk.projectors_pay(H, D, d, edge)


@pytest.mark.parametrize("by_projectors", [True, False])
def test_null_cross_job_gives_the_same_rows_by_either_path(tmp_path, monkeypatch, by_projectors):
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk import pk_null_cross_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=3)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    outs = {}
    for path in (True, False):
        monkeypatch.setattr(pk, "projectors_pay", lambda *_a, _p=path: _p)
        outs[path] = tmp_path / f"{path}.parquet"
        pk_null_cross_job(tmp_path / "store", [0, 1], outs[path], p, log=lambda *_: None)
    (a, prov), (b, _) = read_shard(outs[by_projectors]), read_shard(outs[not by_projectors])
    assert prov["pair_products"] == ("packed projectors" if by_projectors else "stacked-basis blocks")
    a, b = a.to_pydict(), b.to_pydict()
    assert a.keys() == b.keys() and len(a["sd"]) == 2 * 2 * 3 * 3  # nulls x samples x pairs x kinds
    for k in a:
        if k in ("model", "kind", "null", "layer_w", "layer_r", "sample", "n_pairs"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            x, y = np.array(a[k], float), np.array(b[k], float)
            np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
            ok = np.isfinite(y)
            np.testing.assert_allclose(x[ok], y[ok], rtol=1e-11, atol=1e-14, err_msg=k)


def test_null_cross_grouped_products_are_the_per_layer_pair_products_bit_for_bit(tmp_path, monkeypatch):
    """The projectors path stacks writer layers into chunks and reader layers into groups, one GEMM
    per (chunk, group). With budgets of one layer each (every product one writer layer by one
    reader layer, as per-pair products) and with every layer in one chunk and one group, and with
    the chunks spilled to disk (read back memory-mapped), the shard is the same bit for bit, for the
    whole pair list and for a fan-out part that starts mid-model."""
    import headgeom.jobs.pk as jobs_pk
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk import pk_null_cross_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=5)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    monkeypatch.setattr(pk, "projectors_pay", lambda *_a: True)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    budgets = {"one layer each": (1e-9, 1e-9, 512), "all at once": (1e6, 1e6, 512), "spilled": (1e-9, 1e6, 1e-9)}
    for segments in (None, [(1, 3, 5), (2, 3, 4)]):
        shards = {}
        for name, (group_mb, chunk_mb, cache_mb) in budgets.items():
            monkeypatch.setattr(jobs_pk, "READER_GROUP_MB", group_mb)
            monkeypatch.setattr(jobs_pk, "WRITER_CHUNK_MB", chunk_mb)
            monkeypatch.setattr(jobs_pk, "PACKED_WRITER_CACHE_MB", cache_mb)
            out = tmp_path / f"{name}-{segments is None}.parquet"
            pk_null_cross_job(tmp_path / "store", [0, 1], out, p, segments=segments, log=lambda *_: None)
            shards[name] = read_shard(out)[0].to_pydict()
        ref = shards.pop("one layer each")
        n_pairs = 10 if segments is None else 3
        assert len(ref["sd"]) == 2 * 2 * n_pairs * 3  # nulls x samples x pairs x kinds
        for name, got in shards.items():
            assert got.keys() == ref.keys()
            for k in ref:  # floats by their bits (NaN where NaN)
                a, b = np.asarray(ref[k]), np.asarray(got[k])
                if a.dtype.kind == "f":
                    assert np.array_equal(a.view(np.int64), b.view(np.int64)), (name, k)
                else:
                    assert a.tolist() == b.tolist(), (name, k)


def test_layer_groups_cover_the_layers_in_order_within_the_budget():
    from types import SimpleNamespace

    from headgeom.jobs.pk import _packed_mb, layer_groups

    assert layer_groups([3, 4, 5, 6, 7], 20.0, 50.0) == [[3, 4], [5, 6], [7]]
    assert layer_groups([3, 4], 80.0, 50.0) == [[3], [4]]  # a layer larger than the budget is a group alone
    assert layer_groups(list(range(5)), 10.0, 1e6) == [[0, 1, 2, 3, 4]]
    assert layer_groups([], 10.0, 50.0) == []
    # a layer's packed size counts every head of O and Q, a KV group of K and V (GQA: 9 heads, 3 groups)
    f = SimpleNamespace(n_heads=9, n_kv_heads=3, d_model=576)
    one = 576 * 577 // 2 * 8 / 2**20
    assert _packed_mb(f, ("O",)) == pytest.approx(9 * one)
    assert _packed_mb(f, ("Q", "K", "V")) == pytest.approx(15 * one)
