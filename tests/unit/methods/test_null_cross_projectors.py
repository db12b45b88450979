"""Cross-layer null pairs from packed projectors (the whole packings of tests/helpers/references.py)
against independent computations: principal angles (scipy: PK = sum cos^2), explicit D x D
projector traces, and the stacked-basis blocks path, in the kernels and through the job."""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from headgeom.io.shards import read_shard
from headgeom.methods import overlap, projectors
from headgeom.jobs import pk_paper as pkjobs
from references import cross_rho_projectors, float32_pk_bound, packed_projectors, projector_pk


def _bases(n, D, d, seed, drop=()):
    """n orthonormal bases of random d-dim subspaces; heads in ``drop`` lose their last column
    (rank d - 1) the way orthonormal_bases leaves a rank-deficient head."""
    X = np.random.default_rng(seed).standard_normal((n, D, d))
    for h in drop:
        X[h, :, -1] = X[h, :, 0]  # rank d - 1
    return overlap.orthonormal_bases(X)


@pytest.mark.parametrize("D,d,nw,nr", [(24, 5, 3, 4), (40, 8, 2, 5), (17, 3, 4, 1)])
def test_projector_pk_is_the_sum_of_squared_principal_cosines(D, d, nw, nr):
    Bw, rw = _bases(nw, D, d, 1, drop=(0,))
    Br, rr = _bases(nr, D, d, 2)
    got = projector_pk(packed_projectors(Bw, twice_upper=True), packed_projectors(Br))
    assert rw[0] == d - 1
    np.testing.assert_allclose(projectors.projector_gram([Bw], [Br]), got, rtol=1e-14)  # slab by slab: the same terms
    for i in range(nw):
        for j in range(nr):
            U, V = Bw[i][:, :rw[i]], Br[j][:, :rr[j]]
            want = np.sum(np.cos(subspace_angles(U, V)) ** 2)
            explicit = np.trace((U @ U.T) @ (V @ V.T))
            assert got[i, j] == pytest.approx(want, rel=1e-12, abs=1e-13)
            assert got[i, j] == pytest.approx(explicit, rel=1e-12, abs=1e-13)


def test_packed_slabs_are_the_projector_blocks_with_the_writer_weights(monkeypatch):
    """Each slab (rows a..b, columns c..e) of a head's packing is the block (U U^T)[a:b, c:e], read off
    an explicit projector; the writer's (twice_upper) has every entry right of its band's diagonal
    block doubled. The slabs cover the upper triangle once and only their bands' diagonal blocks below
    it; a band is cut into column blocks when it holds more than SLAB_ELEMS entries."""
    monkeypatch.setattr(projectors, "SLAB_ELEMS", 40)
    projectors.projector_slabs.cache_clear()
    try:
        D = 37
        B, _ = _bases(3, D, 4, 4)
        slabs = projectors.projector_slabs(D)
        assert [(s.a, s.b, s.c, s.e) for s in slabs] == [(0, 16, 0, 18), (0, 16, 18, 37), (16, 32, 16, 37),
                                                         (32, 37, 32, 37)]
        assert [s.offset for s in slabs] == list(np.cumsum([0] + [s.size for s in slabs[:-1]]))
        count = np.zeros((D, D), int)
        for s in slabs:
            count[s.a:s.b, s.c:s.e] += 1
        band = np.repeat(np.arange(3), [16, 16, 5])
        same_band = band[:, None] == band[None, :]
        np.testing.assert_array_equal(count, np.triu(np.ones((D, D), int)) | same_band)
        P, P2 = packed_projectors(B), packed_projectors(B, twice_upper=True)
        assert P.shape == (3, projectors.packed_length(D)) == (3, D * (D + 1) // 2 + (16 * 15 * 2 + 5 * 4) // 2)
        for h in range(3):
            full = B[h] @ B[h].T
            for s in slabs:
                got = P[h, s.offset:s.offset + s.size].reshape(s.b - s.a, s.e - s.c)
                got2 = P2[h, s.offset:s.offset + s.size].reshape(s.b - s.a, s.e - s.c)
                np.testing.assert_allclose(got, full[s.a:s.b, s.c:s.e], rtol=1e-13, atol=1e-15)
                weight = np.where(same_band[s.a:s.b, s.c:s.e], 1.0, 2.0)
                np.testing.assert_array_equal(got2, weight * got)
    finally:
        projectors.projector_slabs.cache_clear()


def test_slab_layout_bands_and_blocks():
    """Bands of D / 16 rows; up to D = 2048 each band is one full-width slab (every embedded model),
    wider ones are cut into blocks of at most about SLAB_ELEMS entries, as wide as the band is tall
    or wider."""
    for D in (384, 576, 640, 1024, 2048):
        slabs = projectors.projector_slabs(D)
        assert all(s.c == s.a and s.e == D and s.b - s.a == min(D // 16, D - s.a) for s in slabs)
    for D in (3584, 4096, 5120, 8192):
        slabs = projectors.projector_slabs(D)
        assert {s.b - s.a for s in slabs} == {D // 16}
        assert all(s.size <= projectors.SLAB_ELEMS * 1.01 and s.e - s.c >= s.b - s.a for s in slabs)
        assert sum(s.c > s.a for s in slabs) > len(slabs) // 2  # most slabs are blocks right of a diagonal block
        assert projectors.packed_length(D) == D * (D + 1) // 2 + 16 * (D // 16) * (D // 16 - 1) // 2


def test_projector_gram_over_column_blocks_is_the_explicit_projector_trace(monkeypatch):
    """The weights across a band's column blocks (only the first holds the diagonal block): projector_gram
    with bands cut into 6 blocks against tr(P_w P_r) from explicit projectors, 1e-12 relative."""
    monkeypatch.setattr(projectors, "SLAB_ELEMS", 64)
    projectors.projector_slabs.cache_clear()
    try:
        Bw, _ = _bases(4, 96, 8, 17)
        Br, _ = _bases(5, 96, 8, 18)
        assert max(sum(s.a == a for s in projectors.projector_slabs(96)) for a in (0, 16)) == 6
        want = np.array([[np.trace((Bw[i] @ Bw[i].T) @ (Br[j] @ Br[j].T)) for j in range(5)] for i in range(4)])
        np.testing.assert_allclose(projectors.projector_gram([Bw], [Br[:2], Br[2:]]), want, rtol=1e-12, atol=0)
    finally:
        projectors.projector_slabs.cache_clear()


@pytest.mark.parametrize("D,d,nw,nr,dtype", [(96, 8, 6, 9, np.float64), (257, 16, 5, 7, np.float64),
                                             (96, 8, 6, 9, np.float32)])
def test_projector_gram_is_the_explicit_projector_trace(D, d, nw, nr, dtype):
    """projector_gram over lists of layers (several slabs) against tr(P_w P_r) from explicit D x D
    projectors: 1e-12 relative in float64; in float32 within the bound stated in docs/methods.md
    (projectors.FLOAT32_RHO_BOUND on rho = PK / d)."""
    Bw, rw = _bases(nw, D, d, 7, drop=(1,))
    Br, rr = _bases(nr, D, d, 8)
    assert len(projectors.projector_slabs(D)) > 1 or D < 100
    want = np.array([[np.trace((Bw[i] @ Bw[i].T) @ (Br[j] @ Br[j].T)) for j in range(nr)] for i in range(nw)])
    W = [Bw[:2].astype(dtype), Bw[2:].astype(dtype)]
    R = [Br[:4].astype(dtype), Br[4:5].astype(dtype), Br[5:].astype(dtype)]
    got = projectors.projector_gram(W, R)
    assert got.dtype == np.float64 and got.shape == (nw, nr)
    if dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    else:
        assert np.abs(got - want).max() <= float32_pk_bound(d)
        assert np.abs(got - want).max() > 1e-10  # it is float32 arithmetic


def test_packing_on_worker_threads_is_the_same_bits_as_one_thread():
    """projector_gram with ``run_tasks`` (a job on several cores: the packing on its draw workers, one BLAS
    thread each, in tasks of at most PACK_TASK_HEADS heads) equals the packing in one thread bit for bit, over
    arrays that cross the task size; each slab's packing is one batch of tasks covering every head once."""
    from threadpoolctl import threadpool_limits

    from headgeom.jobs.draws import Draws

    Bw, _ = _bases(11, 96, 8, 21)
    Br, _ = _bases(13, 96, 8, 22)
    W, R = [Bw[:9], Bw[9:]], [Br[:3], Br[3:]]
    with threadpool_limits(limits=1):
        want = projectors.projector_gram(W, R)
    batches = []

    def run(tasks):
        batches.append(len(tasks))
        pool.run(tasks)

    with Draws(2) as pool, threadpool_limits(limits=1):
        got = projectors.projector_gram(W, R, run_tasks=run)
    np.testing.assert_array_equal(got, want)
    assert batches == [2 + 1 + 1 + 2] * len(projectors.projector_slabs(96))  # 9, 2 | 3, 10 heads in tasks of 8


def test_cross_rho_projectors_equals_the_blocks_path_with_nan_heads():
    X = np.random.default_rng(3).standard_normal((4, 30, 6))
    X[2, 0, 0] = np.nan  # non-finite head: rank -1, its pairs NaN
    Bw, rw = overlap.orthonormal_bases(X)
    Br, rr = _bases(3, 30, 6, 5, drop=(1,))
    blocks = overlap.cross_pairs(Bw, rw, Br, rr, angles=False)["rho"]
    proj = cross_rho_projectors(packed_projectors(Bw, twice_upper=True), rw, packed_projectors(Br), rr)
    assert proj.shape == (4, 3)
    proj = proj.ravel()
    np.testing.assert_array_equal(np.isnan(proj), np.isnan(blocks))
    assert np.isnan(proj.reshape(4, 3)[2]).all() and np.isfinite(proj.reshape(4, 3)[[0, 1, 3]]).all()
    ok = np.isfinite(blocks)
    np.testing.assert_allclose(proj[ok], blocks[ok], rtol=1e-12)


def test_projectors_pay_by_counted_flops_and_bytes():
    """The route: projector Grams at the papers' shapes and the embedded models'; blocks where
    D d^2 is below the projector's D^2 / 2 per pair, or with no pairs."""
    assert projectors.projectors_pay(28, 3584, 128, 28, 4)  # Qwen2.5-7B
    assert projectors.projectors_pay(64, 4096, 128, 94, 4)  # Qwen3-235B
    assert projectors.projectors_pay(9, 576, 64, 30, 3)  # SmolLM2-135M
    assert not projectors.projectors_pay(12, 768, 16, 12)  # D d^2 well below D^2 / 2: blocks are cheaper per pair
    assert not projectors.projectors_pay(9, 576, 64, 1, 3)  # no pairs
    t = projectors.null_cross_route_seconds(3584, 128, 28, 36, 28)
    # the counts behind it: blocks 2 D d^2 a pair, the slab products 2 L_p a pair (L_p ~ D (D + 1) / 2)
    speed = projectors.GEMM_FLOPS
    assert t["blocks"] == pytest.approx(2 * 3584 * 128**2 * 28 * 36 / (speed * projectors.ROUTE_RATES["blocks"]))
    assert t["gram"] == pytest.approx(2 * projectors.packed_length(3584) * 28 * 36 / (speed * projectors.ROUTE_RATES["gram"]))
    assert 3584 * 3585 // 2 < projectors.packed_length(3584) < 1.07 * 3584 * 3585 / 2
    assert t["projectors"] == pytest.approx(t["gram"] + t["pack"])
    # each head packed once per sample (2 d L_p FLOPs), shared by the `side` layers of a tile it meets
    side = projectors.tile_side(3584, 128, 28, 36, 28)
    assert t["side"] == side and 1 < side <= 27
    Lp = projectors.packed_length(3584)
    one_head = 2 * 128 * Lp / (speed * projectors.ROUTE_RATES["pack"]) + 8 * Lp * projectors.BYTES_PER_FLOP_TIME  # + its entries written
    assert t["pack"] == pytest.approx(64 * one_head / side)
    # a tile's side within the memory budget of each side of a call, the largest that fits or the
    # whole triangle (n_layers - 1); float32 halves a head's memory
    assert side * 36 * projectors.head_mib(3584, 128) <= projectors.NULL_CROSS_SIDE_MB
    assert side == 27 or (side + 1) * 36 * projectors.head_mib(3584, 128) > projectors.NULL_CROSS_SIDE_MB
    # Qwen3-235B (64 writers; 64 + 4 + 4 reading spaces a layer): memory, not the layer count, bounds it
    side_235b = projectors.tile_side(4096, 128, 64, 72, 94)
    assert side_235b < 93 and (side_235b + 1) * 72 * projectors.head_mib(4096, 128) > projectors.NULL_CROSS_SIDE_MB
    assert side_235b * 72 * projectors.head_mib(4096, 128) <= projectors.NULL_CROSS_SIDE_MB
    assert projectors.tile_side(4096, 128, 64, 72, 94, 4) > side_235b
    assert projectors.tile_side(576, 64, 9, 15, 30) == 29  # a small model: the whole triangle in one call


@pytest.mark.parametrize("by_projectors", [True, False])
def test_null_cross_job_gives_the_same_rows_by_either_path(tmp_path, monkeypatch, by_projectors):
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=3)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    outs = {}
    for path in (True, False):
        monkeypatch.setattr(projectors, "projectors_pay", lambda *_a, _p=path, **_k: _p)
        outs[path] = tmp_path / f"{path}.parquet"
        pk_null_cross_job(tmp_path / "store", [0, 1], outs[path], p, log=lambda *_: None)
    (a, prov), (b, _) = read_shard(outs[by_projectors]), read_shard(outs[not by_projectors])
    assert prov["pair_products"] == ("projector Grams" if by_projectors else "stacked-basis blocks")
    a, b = a.to_pydict(), b.to_pydict()
    assert a.keys() == b.keys() and len(a["sd"]) == 2 * 2 * 3 * 3  # nulls x samples x pairs x kinds
    for k in a:
        if k in ("model", "kind", "null", "layer_w", "layer_r", "sample", "n_pairs"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            x, y = np.array(a[k], float), np.array(b[k], float)
            np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
            ok = np.isfinite(y)
            np.testing.assert_allclose(x[ok], y[ok], rtol=1e-12, atol=1e-15, err_msg=k)


def test_null_cross_grouped_products_are_the_per_layer_pair_products_bit_for_bit(tmp_path, monkeypatch):
    """The projector route packs reader layers in groups and writer layers in chunks, one Gram per
    (chunk, group). With one layer a side (every product one writer layer by one reader layer, as
    per-pair products), with every layer in one call, and with the writers spilled to disk (read back
    memory-mapped), the shard is the same bit for bit, for the whole pair list and for a fan-out part
    that starts mid-model."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=5)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    monkeypatch.setattr(projectors, "projectors_pay", lambda *_a, **_k: True)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    budgets = {"one layer each": (1e-9, 512), "all at once": (1e6, 512), "spilled": (1e6, 1e-9)}
    for segments in (None, [(1, 3, 5), (2, 3, 4)]):
        shards = {}
        for name, (side_mb, cache_mb) in budgets.items():
            monkeypatch.setattr(projectors, "NULL_CROSS_SIDE_MB", side_mb)
            monkeypatch.setattr(pkjobs, "WRITER_CACHE_MB", cache_mb)
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


def test_layer_groups_cover_the_layers_in_order():
    from headgeom.jobs.pk_paper import layer_groups

    assert layer_groups([3, 4, 5, 6, 7], 2) == [[3, 4], [5, 6], [7]]
    assert layer_groups([3, 4], 0) == [[3], [4]]  # at least one layer a call
    assert layer_groups(list(range(5)), 10**6) == [[0, 1, 2, 3, 4]]
    assert layer_groups([], 2) == []
    # a call's layers: whole layers whose bases and slab rows fit the side's budget
    per_head = projectors.head_mib(576, 64)
    assert projectors.layers_per_call(576, 64, 15, budget_mb=15 * per_head * 3.5) == 3
    assert projectors.layers_per_call(576, 64, 15, budget_mb=1.0) == 1


def test_projector_gram_from_each_writers_first_partner(monkeypatch):
    """partners_from: each writer array's columns from its first partner on are tr(P_w P_r) of explicit
    D x D projectors (1e-12 relative); the columns left of a run's smallest start are not computed (0).
    Runs of at least PRODUCT_ROWS writer heads: with 2 a run, writer arrays of 1, 2 and 2 heads make
    runs [0, 3) from column min(0, 2) and [3, 5) from column 4."""
    monkeypatch.setattr(projectors, "PRODUCT_ROWS", 2)
    D, d = 120, 6
    Bw, _ = _bases(5, D, d, 11, drop=(3,))
    Br, _ = _bases(7, D, d, 12)
    W, R = [Bw[:1], Bw[1:3], Bw[3:]], [Br[:2], Br[2:4], Br[4:]]
    want = np.array([[np.trace((Bw[i] @ Bw[i].T) @ (Br[j] @ Br[j].T)) for j in range(7)] for i in range(5)])
    assert projectors.product_runs([1, 2, 2], [0, 2, 4], 7) == [(0, 3, 0), (3, 5, 4)]
    got = projectors.projector_gram(W, R, partners_from=[0, 2, 4])
    np.testing.assert_allclose(got[:3], want[:3], rtol=1e-12)
    np.testing.assert_allclose(got[3:, 4:], want[3:, 4:], rtol=1e-12)
    assert (got[3:, :4] == 0).all()
    # every column computed: the whole Gram (BLAS may round a run's product apart from the whole one's)
    full = projectors.projector_gram(W, R)
    np.testing.assert_allclose(projectors.projector_gram(W, R, partners_from=[0, 0, 0]), full, rtol=1e-14)
    assert projectors.product_runs([1, 2, 2], [7, 7, 7], 7) == []  # no partner: nothing computed
    with pytest.raises(ValueError, match="partners_from"):
        projectors.projector_gram(W, R, partners_from=[0, 8, 0])


def test_a_tile_is_one_call_a_sample_with_every_head_packed_once(tmp_path, monkeypatch):
    """The new layout against the blocks route (U_w^T U_r, an independent computation of the same PK):
    a model cut into tiles (fanout.tile_parts, the diagonal tiles included) gives, part by part, the
    null statistics of the blocks route to 1e-12 relative in float64, and each part makes one
    projector_gram call per sample and null in which each of its writer and reader heads is packed once
    per slab."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from headgeom.schedule.fanout import tile_parts
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=6)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    calls, packed = [], []
    real_gram, real_pack = projectors.projector_gram, projectors.pack_slab

    def counting_gram(writers, readers, *a, **k):
        calls.append((sum(B.shape[0] for B in writers), sum(B.shape[0] for B in readers)))
        return real_gram(writers, readers, *a, **k)

    def counting_pack(bases, slab, out, twice_upper=False):
        if not isinstance(bases, (list, tuple)):
            packed.append((slab, bases.shape[0]))
        return real_pack(bases, slab, out, twice_upper)

    monkeypatch.setattr(projectors, "projector_gram", counting_gram)
    monkeypatch.setattr(projectors, "pack_slab", counting_pack)
    parts = tile_parts(6, 2)
    assert len(parts) == 6 and sum(len(s) for s in parts) > 6  # diagonal tiles (triangles) and squares
    for i, seg in enumerate(parts):
        rows = {}
        for by_projectors in (True, False):
            monkeypatch.setattr(projectors, "projectors_pay", lambda *_a, _p=by_projectors, **_k: _p)
            calls.clear(), packed.clear()
            out = tmp_path / f"{i}-{by_projectors}.parquet"
            pk_null_cross_job(tmp_path / "store", [0, 1], out, p, segments=seg, log=lambda *_: None)
            rows[by_projectors] = read_shard(out)[0].to_pydict()
            if by_projectors:
                writers = {w for w, _, _ in seg}
                readers = {r for _, r0, r1 in seg for r in range(r0, r1)}
                assert len(calls) == 2 * 2  # nulls x samples: one call each
                heads = calls[0][0] + calls[0][1]
                slabs = len(projectors.projector_slabs(48))
                assert sum(n for _, n in packed) == 2 * 2 * slabs * heads  # each head once per slab and call
                assert calls[0][0] == 4 * len(writers) and calls[0][1] == (4 + 2 + 2) * len(readers)  # 4 q / 2 kv heads
            else:
                assert calls == []
        a, b = rows[True], rows[False]
        assert a.keys() == b.keys() and len(a["sd"]) == 2 * 2 * 3 * sum(r1 - r0 for _, r0, r1 in seg)
        for k in a:
            if k in ("model", "kind", "null", "layer_w", "layer_r", "sample", "n_pairs"):
                assert a[k] == b[k], k
            else:
                x, y = np.array(a[k], float), np.array(b[k], float)
                np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
                ok = np.isfinite(y)
                np.testing.assert_allclose(x[ok], y[ok], rtol=1e-12, atol=1e-15, err_msg=k)


@pytest.mark.parametrize("by_projectors", [True, False])
def test_null_cross_job_on_more_threads_gives_the_same_rows_bit_for_bit(tmp_path, monkeypatch, by_projectors):
    """pk.nulls.cross_threads: the draws in worker threads (the rotation's QR with the GIL released) and
    the products on more BLAS threads give the one-thread shard bit for bit, on a shape whose writer and
    Q matrices are wide (n d > D: the rotation's LQ factor, prepared once per layer and shared), with
    every layer in one call and with one layer a side (many calls, writers spilled). (GEMMs this small
    run on one BLAS thread whatever the limit; at the papers' widths the products may round apart by
    1e-16: `make bench` null_cross_threads.) The job records the threads it ran."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_cross_job
    from synth import write_llama

    write_llama(tmp_path / "ck", d_model=48, n_heads=4, n_kv=2, d_head=16, n_layers=5, closed=())
    fetch_model("wide", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    monkeypatch.setattr(projectors, "projectors_pay", lambda *_a, **_k: by_projectors)
    from headgeom.jobs.draws import BLAS_THREAD_VARS

    for v in BLAS_THREAD_VARS:  # the job's cores from its config alone (an environment's count would cap them)
        monkeypatch.delenv(v, raising=False)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "cross_kinds": ["Q", "K", "V"]}
    for side_mb, cache_mb in ((1e6, 512), (1e-9, 1e-9)):
        monkeypatch.setattr(projectors, "NULL_CROSS_SIDE_MB", side_mb)
        monkeypatch.setattr(pkjobs, "WRITER_CACHE_MB", cache_mb)
        shards = {}
        for threads in (1, 2, 3):
            out = tmp_path / f"t{threads}-{side_mb}.parquet"
            pk_null_cross_job(tmp_path / "store", [0, 1], out, {**p, "cross_threads": threads}, log=lambda *_: None)
            table, prov = read_shard(out)
            assert prov["threads"] == min(threads, len(os.sched_getaffinity(0)))  # at most the cores it may use
            shards[threads] = table.to_pydict()
        ref = shards.pop(1)
        assert len(ref["sd"]) == 2 * 2 * 10 * 3  # nulls x samples x pairs x kinds
        for threads, got in shards.items():
            assert got.keys() == ref.keys()
            for k in ref:
                a, b = np.asarray(ref[k]), np.asarray(got[k])
                if a.dtype.kind == "f":
                    assert np.array_equal(a.view(np.int64), b.view(np.int64)), (threads, k)
                else:
                    assert a.tolist() == b.tolist(), (threads, k)
