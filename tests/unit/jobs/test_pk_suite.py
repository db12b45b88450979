"""PK suite: cross-layer pairs, lower bound, nulls, self-head overlap, calibration."""

import numpy as np
import pyarrow.parquet as pq
from scipy.linalg import subspace_angles

from headgeom.core import stats
from headgeom.methods import nulls
from headgeom.methods import overlap
from headgeom.core.seeds import rng_for

rng = np.random.default_rng(2024)


def test_cross_pairs_match_pairwise_definitions():
    D, d = 40, 5
    Xw, Xr = rng.standard_normal((3, D, d)), rng.standard_normal((4, D, d))
    Bw, rw = overlap.orthonormal_bases(Xw)
    Br, rr = overlap.orthonormal_bases(Xr)
    out = overlap.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr)
    assert len(out["rho"]) == 12
    for p in range(12):
        i, j = out["head_w"][p], out["head_r"][p]
        Pi, Pj = Xw[i] @ np.linalg.pinv(Xw[i]), Xr[j] @ np.linalg.pinv(Xr[j])
        assert np.isclose(out["pk"][p], np.trace(Pi @ Pj), rtol=1e-10)
        assert np.isclose(out["min_angle_deg"][p], np.degrees(subspace_angles(Xw[i], Xr[j]).min()), atol=1e-7)
        R, B = Xr[j].T, Xw[i]
        w = D * np.linalg.norm(R @ B) ** 2 / (np.linalg.norm(R) ** 2 * np.linalg.norm(B) ** 2)
        assert np.isclose(out["weighted"][p], w, rtol=1e-10)


def test_spectral_weighted_measure_near_one_for_gaussians():
    D, d = 300, 16
    Xw, Xr = rng.standard_normal((6, D, d)), rng.standard_normal((6, D, d))
    Bw, rw = overlap.orthonormal_bases(Xw)
    Br, rr = overlap.orthonormal_bases(Xr)
    w = overlap.cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, angles=False)["weighted"]
    assert abs(w.mean() - 1) < 0.1


def test_lower_bound_proposition():
    """max_i rho(W, U_i) >= lambda_min(S)/H for any d-dim W when the U_i span R^D."""
    D, d, H = 24, 4, 8  # H d = 32 >= D
    U = rng.standard_normal((H, D, d)) * np.linspace(0.2, 3, D)[None, :, None]
    Bu, ru = overlap.orthonormal_bases(U)
    lam = overlap.lambda_min_S(Bu)
    S = sum(B @ B.T for B in Bu)  # D x D: tests only
    assert np.isclose(lam, np.linalg.eigvalsh(S)[0], rtol=1e-8)
    for _ in range(20):
        W, rw = overlap.orthonormal_bases(rng.standard_normal((1, D, d)))
        rho = overlap.rho_matrix(W, rw, Bu, ru)[0]
        assert rho.max() >= lam / H - 1e-12
    # writers that do not span: lambda_min = 0
    assert overlap.lambda_min_S(Bu[:5]) == 0.0


def test_rotation_null_keeps_spectrum_and_reassign_keeps_columns():
    S = rng.standard_normal((20, 30)) * np.linspace(0.1, 5, 30)
    r = nulls.rotate_spectrum(S, np.random.default_rng(1))
    np.testing.assert_allclose(np.linalg.svd(r, compute_uv=False), np.linalg.svd(S, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose(r @ r.T, S @ S.T, rtol=1e-9, atol=1e-9)
    assert not np.allclose(r, S)
    p = nulls.reassign_columns(S, np.random.default_rng(1))
    assert sorted(map(tuple, p.T.round(12))) == sorted(map(tuple, S.T.round(12)))
    Q = nulls.haar_stiefel(50, 50, np.random.default_rng(3))
    np.testing.assert_allclose(Q.T @ Q, np.eye(50), atol=1e-12)
    X = rng.standard_normal((3, 20, 4))
    np.testing.assert_array_equal(nulls.unstack(nulls.stack(X), 3), X)


def test_haar_first_column_is_uniform_on_the_sphere():
    g = np.random.default_rng(5)
    cols = np.array([nulls.haar_stiefel(6, 6, g)[:, 0] for _ in range(3000)])
    assert np.all(np.abs(cols.mean(0)) < 0.05)  # no sign bias (the R-diagonal fix)
    np.testing.assert_allclose((cols**2).mean(0), 1 / 6, atol=0.02)


def test_empirical_p_phipson_smyth():
    assert stats.empirical_p(5.0, [1, 2, 3]) == 1 / 4
    assert stats.empirical_p(2.0, [1, 2, 3]) == 3 / 4
    assert list(nulls.sample_range(25, 2, 10)) == list(range(20, 25)) and nulls.n_blocks(25, 10) == 3


def test_self_overlap_exhaustive_for_groups():
    H, G = 6, 3
    labels = np.arange(H) // 2
    m = np.full((H, G), 0.1)
    m[np.arange(H), labels] = 0.5  # own group overlaps more
    obs, null, p, exact = overlap.self_overlap_test(m, labels, rng, n_perm=10_000)
    assert exact and null.size == 5 and obs == 0.5 and np.isclose(p, 1 / 6)
    obs, null, p, exact = overlap.self_overlap_test(np.full((8, 8), 0.2), np.arange(8), np.random.default_rng(0), n_perm=500)
    assert not exact and null.size == 500 and p == 1.0


def test_calibration_on_gaussian_weights():
    """Random Gaussian heads: mean rho ~ d/D, SD ~ the random-subspace formula, and the nulls
    flag 'dispersion beyond every null sample' no more often than chance."""
    D, d, H = 128, 8, 8
    iso, sd = overlap.isotropic_rho(d, D), overlap.isotropic_sd(d, D)
    means, sds, exceed, n_layers, n = [], [], 0, 40, 9
    g = np.random.default_rng(11)
    for layer in range(n_layers):
        X = g.standard_normal((H, D, d))
        B, r = overlap.orthonormal_bases(X)
        rho = overlap.pk_within(B, r)["rho"]
        means.append(rho.mean())
        sds.append(rho.std())
        null_sds = []
        for null in ("rotation", "reassign"):
            for s in range(n):
                Bn, rn = overlap.orthonormal_bases(nulls.null_factors(X, null, rng_for("calib", layer, null, s)))
                null_sds.append(overlap.pk_within(Bn, rn)["rho"].std())
        exceed += rho.std() > max(null_sds)
    assert abs(np.mean(means) - iso) < 4 * sd / np.sqrt(n_layers * H * (H - 1) / 2)
    assert 0.8 < np.sqrt(np.mean(np.square(sds))) / sd < 1.25
    # under exchangeability P(obs > all 2n samples) = 1/(2n+1) ~ 0.053: expect ~2 of 40
    assert exceed <= 7, exceed


def test_null_blocks_are_identical_to_one_job(tmp_path):
    """Seeds depend on (model, layer, null, kind, sample) only: any fan-out gives the same draws."""
    from headgeom.io.fetch import fetch_model
    from headgeom.jobs.pk_paper import pk_null_within_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=1)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    p = {"rank_rtol": 1e-6, "types": ["rotation", "reassign"], "kinds": ["O", "Q"]}
    pk_null_within_job(tmp_path / "store", 0, [0, 1, 2], tmp_path / "all.parquet", p, log=lambda *_: None)
    pk_null_within_job(tmp_path / "store", 0, [0], tmp_path / "b0.parquet", p, log=lambda *_: None)
    pk_null_within_job(tmp_path / "store", 0, [1, 2], tmp_path / "b1.parquet", p, log=lambda *_: None)
    a = pq.read_table(tmp_path / "all.parquet").to_pylist()
    b = pq.read_table(tmp_path / "b0.parquet").to_pylist() + pq.read_table(tmp_path / "b1.parquet").to_pylist()
    key = lambda r: (r["kind"], r["null"], r["sample"])  # noqa: E731
    assert sorted(a, key=key) == sorted(b, key=key)


def test_null_job_stacks_each_kind_once_for_all_its_draws(tmp_path):
    """pk_null_within_job hands every draw of a kind the same stacked (D, n d) layer matrix (one
    copy per kind, not one per draw), with the values of the kind's stacked factors."""
    from headgeom.io.fetch import fetch_model
    from headgeom.io.store import TensorStore
    from headgeom.jobs.pk_paper import pk_null_within_job
    from synth import write_llama

    write_llama(tmp_path / "ck", n_layers=1)
    fetch_model("tiny", {"source": "local", "path": str(tmp_path / "ck")}, tmp_path / "store", log=lambda *_: None)
    seen = []

    def spy(S, rng):
        seen.append(S)
        return nulls.reassign_columns(S, rng)

    nulls.register_null(nulls.NullModel("spy_once", spy, "spy"))
    try:
        pk_null_within_job(tmp_path / "store", 0, [0, 1, 2], tmp_path / "o.parquet",
                           {"types": ["spy_once"], "kinds": ["O", "Q"]}, log=lambda *_: None)
    finally:
        del nulls.NULL_MODELS["spy_once"]
    f = TensorStore(tmp_path / "store").layer_factors(0)
    assert len(seen) == 6
    for k, kind in enumerate(("O", "Q")):
        first = seen[3 * k]
        assert all(S is first or (np.shares_memory(S, first) and S.shape == first.shape) for S in seen[3 * k:3 * k + 3])
        np.testing.assert_array_equal(first, overlap.stacked(overlap.factor_stack(f, kind)))
    assert not np.shares_memory(seen[0], seen[3])
    assert len(pq.read_table(tmp_path / "o.parquet").to_pylist()) == 6


def test_job_resources_scale_with_shape(tmp_path):
    import json
    import math

    import pytest

    from headgeom.schedule import costs
    from headgeom.schedule.costs import REF

    def resources(job, manifest, **kw):  # each job's cost model (headgeom.schedule.families names it)
        return getattr(costs, job)(manifest, **kw)

    def manifest(**f):
        p = tmp_path / f"m{len(list(tmp_path.iterdir()))}.json"
        p.write_text(json.dumps({"fields": {"n_layers": 28, **f}}))
        return p

    ref = manifest(**REF)
    r = resources("pk_cross_layer", ref)
    # 27 later layers' pairs and the writer layer once, at the request's margin
    work = 27 * costs.pk_cross_pair_seconds(ref) + costs.pk_cross_writer_seconds(ref)
    assert r["runtime"] == math.ceil(costs.SAFETY * work / 60) and r["work_s"] == pytest.approx(work)
    assert 1.3 * 1235 <= resources("pk_within_layer", ref)["mem_mb"] < 2 * 1235  # measured peak 1,235 MiB (bench-fullwidth), 1.3x headroom
    nc = resources("pk_null_cross", ref, n_samples=1)
    # writers spill beyond the cache (measured peak 739 MB at 7 and at 28 layers by blocks, docs/performance.md);
    # projector Grams hold up to NULL_CROSS_SIDE_MB of bases and slab rows a side on top
    from headgeom.methods.projectors import NULL_CROSS_SIDE_MB

    assert 739 + NULL_CROSS_SIDE_MB <= nc["mem_mb"] <= 739 + 3 * NULL_CROSS_SIDE_MB
    # one sample of both nulls over all 378 layer pairs: at least the pairs' work, not the floor
    assert nc["runtime"] * 60 >= 378 * 2 * costs.null_cross_route_pair_seconds(ref) and nc["runtime"] > 5
    tiny = manifest(d_model=64, d_head=16, n_heads=4, n_kv_heads=2)
    r = resources("pk_null_cross", tiny)  # a tiny model: the fixed part (Snakemake + Python) and the floors
    assert r["runtime"] == 5 and costs.BASE_MB <= r["mem_mb"] < costs.BASE_MB + 10, r


def test_base_instruct_table_reports_per_layer_differences():
    """Two declared-pair models: per-layer |Δ| of writing-space mean, SD and min angle."""
    from headgeom.outputs.pk.base_instruct import pk_appendix_e_base_instruct as table_base_instruct

    g = np.random.default_rng(8)
    rows = {k: [] for k in ("model", "layer", "kind", "rho", "min_angle_deg")}
    for layer in range(3):
        rho = g.random(6) * 0.3
        ang = 20 + 40 * g.random(6)
        for m, shift in (("base", 0.0), ("inst", 1e-4 * (layer + 1))):
            rows["model"] += [m] * 6
            rows["layer"] += [layer] * 6
            rows["kind"] += ["O"] * 6
            rows["rho"] += list(rho + shift)
            rows["min_angle_deg"] += list(ang)
    cols = {k: np.array(v, dtype=object if k in ("model", "kind") else None) for k, v in rows.items()}
    fields = {m: {"d_head": 8, "d_model": 64} for m in ("base", "inst")}
    t = table_base_instruct({"pk_within": cols}, fields, [("base", "inst")])
    (row,) = t.rows
    assert row["layers"] == 3
    assert np.isclose(row["median_abs_mean"], 2e-4) and np.isclose(row["max_abs_mean"], 3e-4)
    assert row["median_abs_sd"] < 1e-12 and row["median_abs_angle"] == 0.0
    assert table_base_instruct({"pk_within": cols}, fields, []).notes.startswith("No base/instruct pair")
