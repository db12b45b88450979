"""The PK jobs' cost models from counted FLOPs (headgeom.schedule.costs): the FLOPs they count are the
FLOPs the kernels issue (a backend that records every product's shapes), the parts compose as the jobs run, and a
request keeps its margin on the slowest node measured."""

from __future__ import annotations

import numpy as np
import pytest

from headgeom.methods import overlap, projectors
from headgeom.schedule import costs
from recording_backend import ShapeRecordingBackend

QWEN25_7B = {"n_layers": 28, "d_model": 3584, "d_head": 128, "n_heads": 28, "n_kv_heads": 4}
QWEN3_235B = {"n_layers": 94, "d_model": 4096, "d_head": 128, "n_heads": 64, "n_kv_heads": 4}


@pytest.mark.parametrize("D,d,n", [(40, 4, 2), (40, 4, 9), (64, 8, 30), (96, 16, 5), (48, 2, 64)])
def test_upper_blocks_flops_are_what_upper_blocks_multiplies(D, d, n):
    bases = np.random.default_rng(0).standard_normal((n, D, d))
    rec = ShapeRecordingBackend("torch")  # every product through matmul
    got = overlap.upper_blocks(bases, rec)
    assert rec.flops == costs.upper_blocks_flops(D, d, n)
    # and the blocks are the per-pair products (the kernel the count describes)
    iu, ju = np.triu_indices(n, 1)
    np.testing.assert_allclose(got, np.einsum("pki,pkj->pij", bases[iu], bases[ju]), rtol=1e-12, atol=1e-12)
    # at least the pairs' own products, n (n - 1) / 2 of 2 D d^2
    assert costs.upper_blocks_flops(D, d, n) >= n * (n - 1) * D * d * d


def test_a_cross_pairs_gemms_are_what_the_pair_prices():
    """pk_cross_pair_seconds prices two products of the writer's stacked heads with the reader's (bases and
    factors, the weighted overlap): the FLOPs cross_pairs issues for the Q, K and V readers of one layer."""
    f = {"d_model": 40, "d_head": 4, "n_heads": 6, "n_kv_heads": 2}
    D, d, H, G = f["d_model"], f["d_head"], f["n_heads"], f["n_kv_heads"]
    rng = np.random.default_rng(1)
    Xw = rng.standard_normal((H, D, d))
    Bw, rw = overlap.orthonormal_bases(Xw)
    rec = ShapeRecordingBackend("torch")  # every product through matmul
    for n in (H, G, G):  # Q, K, V
        Xr = rng.standard_normal((n, D, d))
        Br, rr = overlap.orthonormal_bases(Xr)
        overlap.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, backend=rec)
    R = H + 2 * G
    assert rec.flops == 2 * 2 * D * (H * d) * (R * d)
    gemm = costs.gemm_seconds(rec.flops)
    rest = costs.read_seconds(f) + costs.bases_seconds(D, d, R) + costs.sigma_seconds(H * R, d)
    assert costs.pk_cross_pair_seconds(f) == pytest.approx(gemm + rest, rel=1e-12)


def test_kernel_seconds_follow_their_flop_counts():
    rate = projectors.GEMM_FLOPS
    assert costs.eigvalsh_seconds(3584) == pytest.approx(4 / 3 * 3584**3 / (rate * costs.KERNEL_RATES["eigvalsh"]))
    assert costs.sigma_seconds(10, 128) == pytest.approx(10 * (10 / 3) * 128**3 / (rate * costs.KERNEL_RATES["sigma"]))
    # the smaller Gram: a wide and a tall stacked matrix of the same sizes cost the same
    assert costs.span_seconds(4096, 8192) == pytest.approx(costs.span_seconds(8192, 4096))
    assert costs.gemm_seconds(1e9, itemsize=4) == pytest.approx(costs.gemm_seconds(1e9) / 2)


def test_a_writer_spans_the_residual_stream_only_when_its_heads_can():
    """lambda_min(S) is 0 without an eigendecomposition when n d < D (methods.overlap.lambda_min_S)."""
    narrow = {"d_model": 64, "d_head": 4, "n_heads": 8, "n_kv_heads": 2}  # 32 < 64
    wide = {**narrow, "n_heads": 16}  # 64 = 64
    base = costs.read_seconds(narrow) + costs.bases_seconds(64, 4, 8)
    assert costs.pk_cross_writer_seconds(narrow) == pytest.approx(base)
    span = costs.gemm_seconds(2 * 64 * 64**2) + costs.eigvalsh_seconds(64)
    assert costs.pk_cross_writer_seconds(wide) == pytest.approx(
        costs.read_seconds(wide) + costs.bases_seconds(64, 4, 16) + span)


def test_a_cross_part_pays_its_pairs_and_each_writer_once():
    one = costs.pk_cross_layer(QWEN25_7B, n_pairs=27, n_writers=1)
    two = costs.pk_cross_layer(QWEN25_7B, n_pairs=27, n_writers=2)
    assert two["work_s"] - one["work_s"] == pytest.approx(costs.pk_cross_writer_seconds(QWEN25_7B))
    more = costs.pk_cross_layer(QWEN25_7B, n_pairs=28, n_writers=1)
    assert more["work_s"] - one["work_s"] == pytest.approx(costs.pk_cross_pair_seconds(QWEN25_7B))


def test_within_nulls_price_their_draws_pairs_and_preparations():
    f, types = QWEN3_235B, ("rotation", "reassign")
    D, d, H, G = f["d_model"], f["d_head"], f["n_heads"], f["n_kv_heads"]
    one = costs.null_within_seconds(f, 1, types, ("Q", "K"))
    three = costs.null_within_seconds(f, 3, types, ("Q", "K"))
    per_sample = sum(costs.draw_seconds(D, d, n, null) + costs.within_pairs_seconds(D, d, n)
                     for n in (H, G) for null in types)
    assert three - one == pytest.approx(2 * per_sample)
    # once a job: the read, and the rotation's LQ factor of the wide Q (64 x 128 > 4096); K is narrow
    fixed = costs.read_seconds(f) + costs.draw_prep_seconds(D, d, H, "rotation")
    assert costs.draw_prep_seconds(D, d, G, "rotation") == 0 and costs.draw_prep_seconds(D, d, H, "reassign") == 0
    assert one == pytest.approx(fixed + per_sample)
    # a kind of one head has no pairs and draws nothing
    mqa = {**f, "n_kv_heads": 1}
    assert costs.null_within_seconds(mqa, 2, types, ("K",)) == pytest.approx(costs.read_seconds(mqa))
    # float32 halves the draws' and products' time, not the statistics' sigma_max
    f32 = costs.null_within_seconds(f, 1, types, ("Q", "K"), precision="float32")
    assert one / 2 < f32 < one


def test_a_request_keeps_its_margin_on_the_slowest_node():
    """The expected work is priced at the reference GEMM rate; the request at the slowest node measured, so
    a job there still has MARGIN x its time."""
    assert costs.SAFETY == pytest.approx(costs.MARGIN * projectors.GEMM_FLOPS / projectors.SLOWEST_GEMM_FLOPS)
    r = costs.pk_cross_layer(QWEN3_235B, n_pairs=40, n_writers=2)
    on_slowest = r["work_s"] * projectors.GEMM_FLOPS / projectors.SLOWEST_GEMM_FLOPS
    assert 60 * r["runtime"] >= costs.MARGIN * on_slowest
    assert 60 * (r["runtime"] - 1) < costs.MARGIN * on_slowest
