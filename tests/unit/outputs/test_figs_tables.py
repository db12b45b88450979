"""Issue 13 items 3-4: the PK figures as the paper draws them (Figure 2's CCDF staircase, random
band and counts, Figure 3's separate panel and r < 1 marker, Figure 9's legend and titles) and the
paper 1 completions (pooled scramble/Haar row, left-zero band by P_iP_j ≈ P_i both ways,
layer-matched AUROC, clustered bootstrap, rank audit). Every expected value is computed here
independently (explicit counts, operators, closed forms), on planted or synthetic inputs."""

import numpy as np
import pytest

from headgeom.core import stats
from headgeom.core.seeds import rng_for
from headgeom.core.factors import LayerFactors
from headgeom.methods import paper1 as P1
from headgeom.methods import pk_conditions as PK
from headgeom.methods.nulls import haar_stiefel
from headgeom.outputs.pk import cross_layer
from headgeom.outputs.pk import nulls
from headgeom.methods.paper1.siblings import band_pairs
from headgeom.methods.paper1.tail import layer_matched, sweep_aurocs
from headgeom.outputs.paper1.capacity import p1_capacity, p1_table3_trajectories
from headgeom.outputs.paper1.latent_closure import p1_latent_closure
from headgeom.outputs.paper1.orientation import p1_orientation_rank_audit, p1_orientation_scramble
from headgeom.outputs.paper1.siblings import p1_anchors
from headgeom.outputs.paper1.strong_tail import p1_threshold_sweep
from headgeom.outputs.formats import ccdf_steps, pyplot

PARAMS = dict(scramble_draws=4, haar_draws=2, split_rtol=1e-8, sv_rtol=1e-12, identity_rtol=1e-10, rank_rtol=1e-6)


def _staircase_at(xs, ys, t):
    """Value of the drawn staircase at t (t strictly inside a horizontal segment)."""
    for k in range(len(xs) - 1):
        if ys[k] == ys[k + 1] and xs[k] < t < xs[k + 1]:
            return ys[k]
    raise AssertionError(f"no horizontal segment over {t}")


# ------------------------------------------------------------------ CCDF staircase


def test_ccdf_staircase_is_the_fraction_at_least_t():
    x = np.array([0.3, 0.1, 0.1, 0.7, 0.5, 0.5, 0.5, 0.9, np.nan])
    xs, ys = ccdf_steps(x)
    fin = x[np.isfinite(x)]
    u = np.unique(fin)
    for a, b in zip(u[:-1], u[1:]):
        t = (a + b) / 2
        assert _staircase_at(xs, ys, t) == pytest.approx(np.mean(fin >= t))
    assert ys[0] == 1.0 and xs[-1] == fin.max() and ys[-1] == pytest.approx(1 / fin.size)


def test_fig2_observed_curve_is_drawn_at_the_right_level():
    data, fields = _fig2_data()
    fig, extra = nulls.pk_fig2_rho_ccdf_nulls(data, fields, ["m"], ("rotation", "reassign"), random_samples=5)
    ax = fig.axes[0]
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "observed")
    rho = PK.observed_within(data["pk_within"], fields)[("m", extra["layers"]["m"], "O")]["rho"]
    xs, ys = line.get_xdata(), line.get_ydata()
    u = np.unique(rho)
    for a, b in zip(u[:-1], u[1:]):
        assert _staircase_at(xs, ys, (a + b) / 2) == pytest.approx(np.mean(rho >= (a + b) / 2))
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert any(lab.startswith("random subspaces") and "n = 5" in lab for lab in labels)
    assert extra["random_samples"] == 5
    pyplot().close(fig)


# ------------------------------------------------------------------ random-subspace reference


def _analytic_sd(D, d):
    return np.sqrt(2 * (D - d) ** 2 / (D**2 * (D - 1) * (D + 2)))


@pytest.mark.parametrize("D,d", [(96, 8), (200, 25)])
def test_random_reference_matches_the_closed_form(D, d):
    r = PK.random_reference("m", D, d, 400)
    sd = _analytic_sd(D, d)
    assert abs(r.mean() - d / D) < 4 * sd / np.sqrt(r.size)
    assert r.std(ddof=1) == pytest.approx(sd, rel=0.15)
    assert np.array_equal(r, PK.random_reference("m", D, d, 400))  # seeded


def test_random_layer_rho_counts_pairs_and_matches_explicit_projectors():
    H, D, d = 5, 30, 4
    rho = PK.random_layer_rho("m", 2, 0, H, D, d)
    assert rho.size == H * (H - 1) // 2
    # independent: rebuild the same subspaces and use projector traces tr(P_i P_j)/d
    rng = rng_for("m", 2, -1, 0, "pk_fig2_random")
    U = [haar_stiefel(D, d, rng) for _ in range(H)]
    Ps = [u @ u.T for u in U]
    expect = [np.trace(Ps[i] @ Ps[j]) / d for i in range(H) for j in range(i + 1, H)]
    np.testing.assert_allclose(rho, expect, rtol=1e-12)


# ------------------------------------------------------------------ Figure 2 counts


def _fig2_data():
    """One model, three layers of 6 heads (15 pairs); layer SDs 0.01 < 0.05 < 0.2 so the upper
    median is layer 1. Null samples: rho in [0.1, 0.4]; medians / p95 planted per layer."""
    r = np.random.default_rng(7)
    obs = {0: 0.25 + 0.01 * r.standard_normal(15), 1: np.linspace(0.0, 0.6, 15), 2: 0.25 + 0.6 * r.standard_normal(15)}
    obs[1][0:3] = [0.01, 0.02, 0.05]  # three below every null value (0.1)
    pk = {"model": [], "layer": [], "kind": [], "rho": [], "min_angle_deg": []}
    for layer, v in obs.items():
        for x in v:
            pk["model"].append("m"), pk["layer"].append(layer), pk["kind"].append("O")
            pk["rho"].append(x), pk["min_angle_deg"].append(10.0)
    nul = {k: [] for k in ("model", "layer", "kind", "null", "sample", "mean", "sd", "median", "p95", "min_angle_deg", "rho")}
    # layer medians: layer 0 obs median ~0.25 vs null medians 0.3 (below all); layer 1 ~0.3 vs 0.2 (not);
    # layer 2 below.  p95: null p95s 0.35, so layers 1, 2 above, layer 0 not.
    for layer in obs:
        for t in ("rotation", "reassign"):
            for k in range(3):
                vals = np.linspace(0.1, 0.4, 15)
                med = 0.2 if layer == 1 else 0.3
                for c, v in (("model", "m"), ("layer", layer), ("kind", "O"), ("null", t), ("sample", k),
                             ("mean", vals.mean()), ("sd", 0.01), ("median", med), ("p95", 0.35),
                             ("min_angle_deg", 20.0), ("rho", vals)):
                    nul[c].append(v)
    pk = {k: np.asarray(v) for k, v in pk.items()}
    nul = {k: (np.asarray(v, dtype=object) if k == "rho" else np.asarray(v)) for k, v in nul.items()}
    fields = {"m": {"d_head": 4, "d_model": 32, "n_heads": 6, "n_layers": 3, "n_kv_heads": 6}}
    return {"pk_within": pk, "pk_null_within": nul}, fields


def test_fig2_counts_table():
    data, fields = _fig2_data()
    t = nulls.pk_fig2_counts(data, fields, ["m"], ("rotation", "reassign"), reference_draws=50)
    (row,) = t.rows
    rho = np.asarray(data["pk_within"]["rho"], float)[np.asarray(data["pk_within"]["layer"]) == 1]
    sds = {L: np.asarray(data["pk_within"]["rho"], float)[np.asarray(data["pk_within"]["layer"]) == L].std() for L in (0, 1, 2)}
    assert sorted(sds, key=sds.get)[1] == row["layer"] == 1
    assert row["pairs"] == 15 and row["median"] == pytest.approx(np.median(rho)) and row["max"] == pytest.approx(0.6)
    for t_ in ("rotation", "reassign"):
        assert row[f"below_all_{t_}"] == int(np.sum(rho < 0.1)) == 3
        assert row[f"above_all_{t_}"] == int(np.sum(rho > 0.4))
        assert row[f"n_{t_}"] == 3
    obs_med = {L: np.median(np.asarray(data["pk_within"]["rho"], float)[np.asarray(data["pk_within"]["layer"]) == L]) for L in (0, 1, 2)}
    obs_p95 = {L: np.quantile(np.asarray(data["pk_within"]["rho"], float)[np.asarray(data["pk_within"]["layer"]) == L], 0.95)
               for L in (0, 1, 2)}
    exp_med = sum(obs_med[L] < (0.2 if L == 1 else 0.3) for L in (0, 1, 2))
    exp_p95 = sum(obs_p95[L] > 0.35 for L in (0, 1, 2))
    assert (row["layers_nulls"], row["layers_median_below"], row["layers_p95_above"]) == (3, exp_med, exp_p95)
    assert row["ref_draws"] == 50 and abs(row["ref_mean"] - 4 / 32) < 5 * _analytic_sd(32, 4) / np.sqrt(50)


# ------------------------------------------------------------------ Figures 3 and 9


def _cond(m, scope, kind, layer, r, n, layer_r=None, below=False, above=False):
    return {"model": m, "scope": scope, "kind": kind, "layer": layer, "layer_r": layer_r, "r": r,
            "n_samples": {"rotation": n, "reassign": n}, "mean_below_all": below, "mean_above_all": above}


def test_fig3_shows_other_sample_counts_apart_and_marks_r_below_one():
    conds = [_cond("a", "within", "O", L, 2.0 + L, 30) for L in range(5)]
    conds += [_cond("a", "within", "Q", 0, 0.972, 30), _cond("a", "within", "Q", 1, 3.0, 30)]
    conds += [_cond("b", "within", "O", 46, 7.1, 3)]
    fig, extra = nulls.draw_fig3(conds, ["a", "b"])
    assert len(fig.axes) == 2
    assert "n = 30" in fig.axes[0].get_title() and "n = 3 " in fig.axes[1].get_title()
    assert extra["below_one"] == [{"model": "a", "scope": "within", "kind": "Q", "where": "layer 0", "r": 0.972}]
    # the one point of the n = 3 panel is b's layer 46
    from matplotlib.collections import PathCollection

    pts = np.concatenate([c.get_offsets() for c in fig.axes[1].collections if isinstance(c, PathCollection)])
    assert pts.shape[0] == 1 and pts[0, 1] == pytest.approx(7.1)
    # the point below 1 is a triangle, labelled with its r
    tri = [c for c in fig.axes[0].collections if isinstance(c, PathCollection) and c.get_offsets().shape[0] == 1 and c.get_offsets()[0, 1] == pytest.approx(0.972)]
    assert tri and tri[0].get_paths()[0].vertices.shape[0] <= 5  # a triangle marker, not a circle
    assert any("r = 0.972" in t.get_text() for t in fig.axes[0].texts)
    pyplot().close(fig)


def _overlaps(fig):
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    boxes = [a.title.get_window_extent(rend) for a in fig.axes if a.get_title()]
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


def test_fig9_titles_do_not_overlap_and_below_above_panels_have_a_legend():
    L = 12
    conds = [_cond(m, "cross", k, lw, 0.5 + (lw * lr) % 7, 30, layer_r=lr, below=(lw + lr) % 3 == 0,
                   above=(lw + lr) % 3 == 1)
             for m in ("model-one-long-name", "model-two") for k in "QKV" for lw in range(L) for lr in range(lw + 1, L)]
    fields = {m: {"n_layers": L} for m in ("model-one-long-name", "model-two")}
    fig, _ = cross_layer.draw_fig9(conds, fields, ["model-one-long-name", "model-two"])
    assert _overlaps(fig) == []
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    assert len(legends) == 2  # one per model, on its below/above row
    assert [t.get_text() for t in legends[0].get_texts()] == [
        "mean below every null sample", "neither", "mean above every null sample"]
    pyplot().close(fig)


# ------------------------------------------------------------------ paper 1: pooled scramble row


def _heads_two_models(sizes=(("a", 10), ("b", 14))):
    r = np.random.default_rng(3)
    cols = {k: [] for k in ("model", "layer", "head", "P", "R_scramble", "R_haar", "sv_relerr", "P_scramble", "P_haar")}
    for m, n in sizes:
        for h in range(n):
            P = float(r.uniform(0, 1))
            scr = r.uniform(0, 0.3, 4)
            haar = r.uniform(0, 0.6, 2)
            for k, v in (("model", m), ("layer", h % 3), ("head", h), ("P", P), ("R_scramble", np.median(scr)),
                         ("R_haar", np.median(haar)), ("sv_relerr", 1e-15), ("P_scramble", scr.tolist()),
                         ("P_haar", haar.tolist())):
                cols[k].append(v)
    out = {k: np.asarray(v) for k, v in cols.items() if k not in ("P_scramble", "P_haar")}
    for k in ("P_scramble", "P_haar"):
        o = np.empty(len(cols[k]), dtype=object)
        o[:] = cols[k]
        out[k] = o
    return out


def test_scramble_table_pooled_row():
    heads = _heads_two_models()
    t = p1_orientation_scramble(heads, ["a", "b"], 0.9)
    pooled = t.rows[-1]
    assert pooled["model"] == "pooled" and pooled["heads"] == 24
    P = heads["P"]
    assert pooled["P_median"] == pytest.approx(np.median(P))
    assert pooled["scr_median"] == pytest.approx(np.median(np.concatenate(list(heads["P_scramble"]))))
    assert pooled["haar_median"] == pytest.approx(np.median(np.concatenate(list(heads["P_haar"]))))
    assert pooled["beat_h_pct"] == pytest.approx(100 * np.mean(P > heads["R_haar"]))
    assert pooled["beat_pct"] == pytest.approx(100 * np.mean(P > heads["R_scramble"]))
    # layers are counted per model: 3 + 3
    assert pooled["layers_pos"].endswith("/6")
    assert [r["model"] for r in t.rows[:2]] == ["a", "b"]


def test_named_pools_pool_their_active_models():
    """paper1.pools: a "pooled <name>" row over the pool's active models, naming them; checked
    against the statistics of those models' heads taken directly."""
    heads = _heads_two_models((("a", 10), ("b", 14), ("c", 8)))
    r = np.random.default_rng(4)
    n = heads["P"].size
    heads |= {"sv_ratio_O": r.uniform(1e-4, 1, n), "sv_ratio_V": r.uniform(1e-4, 1, n), "anchor_cos2": r.uniform(0, 1, n),
              "anchor_cos2_wrong_v": r.uniform(0, 1, n), "oblique_share": r.uniform(0, 1, n),
              "retrieval_rank": r.integers(1, 3, n), "n_value_candidates": np.full(n, 4)}
    heads["P"] = np.where(np.arange(n) % 3 == 0, 0.95, heads["P"])  # strong heads in every model
    pools = {"ab": ["a", "zz", "b"], "none": ["zz"]}
    sel = np.isin(heads["model"], ["a", "b"])

    rows = {x["model"]: x for x in p1_orientation_scramble(heads, ["a", "b", "c"], 0.9, pools=pools).rows}
    assert "pooled none" not in rows and rows["pooled"]["pooled_models"] == "a, b, c"
    ab = rows["pooled ab"]
    assert ab["pooled_models"] == "a, b" and ab["heads"] == 24 and rows["a"]["pooled_models"] is None
    assert ab["P_median"] == pytest.approx(np.median(heads["P"][sel]))
    assert ab["scr_median"] == pytest.approx(np.median(np.concatenate(list(heads["P_scramble"][sel]))))
    assert ab["beat_h_pct"] == pytest.approx(100 * np.mean(heads["P"][sel] > heads["R_haar"][sel]))

    fields = {m: {"d_model": 40, "d_head": 4} for m in "abc"}
    rows = {x["model"]: x for x in p1_orientation_rank_audit(heads, fields, ["a", "b", "c"], "rank_rtol", 0.3,
                                                                pools=pools).rows}
    both = np.concatenate([heads["sv_ratio_O"][sel], heads["sv_ratio_V"][sel]])
    assert rows["pooled ab"]["factors"] == 48 and rows["pooled ab"]["full"] == f"{int(np.sum(both > 0.3))}/48"
    assert rows["pooled ab"]["min_ratio"] == pytest.approx(both.min())
    assert rows["pooled"]["factors"] == 2 * n

    pairs = {k: np.array([], dtype=float) for k in ("P_i", "P_j", "F", "cos2", "layer", "head_i", "head_j")}
    pairs["model"] = np.array([], dtype=str)
    rows = {x["model"]: x for x in p1_anchors(pairs, heads, ["a", "b", "c"], 0.9, pools=pools).rows}
    assert rows["pooled ab"]["strong"] == int(np.sum(heads["P"][sel] >= 0.9)) == rows["a"]["strong"] + rows["b"]["strong"]
    assert rows["pooled"]["strong"] == int(np.sum(heads["P"] >= 0.9))


# ------------------------------------------------------------------ paper 1: left-zero band


def _band_layer(D=30, d=4, seed=0):
    """G = 2 groups of 3 heads. Group 0: three exactly closed heads O_h = a_h (V (VᵀV)⁻¹ + N_h)
    with VᵀN_h = 0, so P_iP_j = P_i for every ordered pair (all 3 pairs in the band) and the P_h
    differ. Group 1: one closed head and two random heads (no band pair)."""
    r = np.random.default_rng(seed)
    W_V = r.standard_normal((2, d, D))
    W_O = r.standard_normal((6, D, d))
    V = W_V[0].T
    PV = V @ np.linalg.solve(V.T @ V, V.T)
    for h, a in ((0, 1.3), (1, -0.7), (2, 2.1)):
        N = (np.eye(D) - PV) @ r.standard_normal((D, d))
        W_O[h] = a * (V @ np.linalg.inv(V.T @ V) + N)
    V1 = W_V[1].T
    W_O[3] = 0.9 * V1 @ np.linalg.inv(V1.T @ V1)
    return LayerFactors(W_Q=r.standard_normal((6, d, D)), W_K=r.standard_normal((2, d, D)), W_V=W_V, W_O=W_O,
                        kv_group=np.array([0, 0, 0, 1, 1, 1]), norm_gain=np.ones(D), norm_type="rmsnorm")


def _with_model(cols, m, layer=0):
    n = len(next(iter(cols.values())))
    return {**cols, "model": np.array([m] * n), "layer": np.full(n, layer)}


def test_left_zero_band_planted():
    f = _band_layer()
    heads, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    # independent: explicit operators P_h = T_h / alpha_h satisfy P_i P_j = P_i in group 0
    T = [f.W_O[h] @ f.W_V[f.kv_group[h]] for h in range(6)]
    for i in range(3):
        for j in range(3):
            if i != j:
                Pi, Pj = T[i] / heads["alpha"][i], T[j] / heads["alpha"][j]
                np.testing.assert_allclose(Pi @ Pj, Pi, atol=1e-9 * np.abs(Pi).max())
    heads, pairs = _with_model(heads, "m"), _with_model(pairs, "m")
    band = band_pairs(pairs, np.ones(len(pairs["F"]), bool), 0.9, 0.9)
    got = {(int(i), int(j)) for i, j in zip(pairs["head_i"][band], pairs["head_j"][band])}
    assert got == {(i, j) for i in range(3) for j in range(3) if i != j}
    t = p1_anchors(pairs, heads, ["m"], 0.9, band={"explanation": 0.9, "min_pairs": 3})
    row = t.rows[0]
    assert row["law_pairs"] == 3 and row["law_products"] == 6 and row["law_counted"] == "yes"
    cos2 = [np.sum(T[i] * T[j]) ** 2 / (np.sum(T[i] ** 2) * np.sum(T[j] ** 2)) for i, j in ((0, 1), (0, 2), (1, 2))]
    assert row["law_cos2"] == pytest.approx(np.median(cos2 + cos2))
    assert row["law_F"] == pytest.approx(1.0)
    # the family filter: with min_pairs = 4 the model is not counted
    assert p1_anchors(pairs, heads, ["m"], 0.9, band={"explanation": 0.9, "min_pairs": 4}).rows[0]["law_counted"] == "no"


def test_band_needs_both_directions_and_both_heads_strong():
    pairs = {"model": np.array(["m"] * 6), "layer": np.zeros(6, int),
             "head_i": np.array([0, 1, 0, 2, 1, 3]), "head_j": np.array([1, 0, 2, 0, 3, 1]),
             "P_i": np.array([0.95, 0.95, 0.95, 0.95, 0.95, 0.5]), "P_j": np.array([0.95, 0.95, 0.95, 0.95, 0.5, 0.95]),
             "F": np.array([0.95, 0.91, 0.97, 0.5, 0.99, 0.99])}
    band = band_pairs(pairs, np.ones(6, bool), 0.9, 0.9)
    assert band.tolist() == [True, True, False, False, False, False]


def _membership_layer(D=30, d=4, seed=0, c=0.3, big=6.0):
    """Group 0: three exactly closed heads O_h = a_h (V (VᵀV)⁻¹ + N_h), VᵀN_h = 0 (P_iP_j = P_i: a band
    pair under either membership). Group 1: head 3 exactly closed with a heavy last oblique column
    N_3 e_d; head 4 = a (V (VᵀV)⁻¹ M + N_4) with M = diag(1, .., 1, c) and N_4 e_d = 0, so its own
    closure stays 1 (its scaled direction carries no oblique energy) while P_3P_4 = P_3 M-ish misses
    P_3 badly (the heavy column is scaled by c): strong pair, P_4P_3 = P_4, P_3P_4 ≉ P_3. Head 5 random."""
    r = np.random.default_rng(seed)
    W_V = r.standard_normal((2, d, D))
    W_O = r.standard_normal((6, D, d))
    for g, spec in ((0, ((0, 1.3, ""), (1, -0.7, ""), (2, 2.1, ""))), (1, ((3, 0.9, "heavy"), (4, 1.1, "scaled")))):
        V = W_V[g].T
        Q = np.eye(D) - V @ np.linalg.solve(V.T @ V, V.T)
        for h, a, kind in spec:
            N, M = Q @ r.standard_normal((D, d)), np.eye(d)
            if kind == "heavy":
                N[:, -1] *= big
            if kind == "scaled":
                N[:, -1], N[:, :-1], M[-1, -1] = 0.0, big * N[:, :-1], c
            W_O[h] = a * (V @ np.linalg.inv(V.T @ V) @ M + N)
    return LayerFactors(W_Q=r.standard_normal((6, d, D)), W_K=r.standard_normal((2, d, D)), W_V=W_V, W_O=W_O,
                        kv_group=np.array([0, 0, 0, 1, 1, 1]), norm_gain=np.ones(D), norm_type="rmsnorm")


def test_band_membership_switch_planted():
    from headgeom.core.errors import ConfigError

    f = _membership_layer()
    # independent: explicit operators, closure and fixed-scale explanation
    T = [f.W_O[h] @ f.W_V[f.kv_group[h]] for h in range(6)]
    alpha = [np.sum((t @ t) * t) / np.sum(t * t) for t in T]
    Pcl = [np.sum((t @ t) * t) ** 2 / (np.sum((t @ t) ** 2) * np.sum(t * t)) for t in T]

    def expl(i, j):
        Pi, Pj = T[i] / alpha[i], T[j] / alpha[j]
        return 1 - np.sum((Pi @ Pj - Pi) ** 2) / np.sum((Pi @ Pj) ** 2)

    assert min(Pcl[:5]) > 0.99 and Pcl[5] < 0.9
    assert expl(3, 4) < 0.5 and expl(4, 3) > 0.99  # one way only
    assert all(expl(i, j) > 0.99 for i in range(3) for j in range(3) if i != j)
    heads, pairs = P1.heads_layer(f, "m", 0, PARAMS)
    heads, pairs = _with_model(heads, "m"), _with_model(pairs, "m")
    sel = np.ones(len(pairs["F"]), bool)

    def unordered(mask):
        return {tuple(sorted((int(i), int(j)))) for i, j in zip(pairs["head_i"][mask], pairs["head_j"][mask])}

    assert unordered(band_pairs(pairs, sel, 0.9, 0.9)) == {(0, 1), (0, 2), (1, 2)}
    assert unordered(band_pairs(pairs, sel, 0.9, 0.9, "explanation")) == {(0, 1), (0, 2), (1, 2)}
    assert unordered(band_pairs(pairs, sel, 0.9, 0.9, "strong")) == {(0, 1), (0, 2), (1, 2), (3, 4)}
    cos2 = {(i, j): np.sum(T[i] * T[j]) ** 2 / (np.sum(T[i] ** 2) * np.sum(T[j] ** 2))
            for i, j in ((0, 1), (0, 2), (1, 2), (3, 4))}
    for membership, want in (("explanation", [(0, 1), (0, 2), (1, 2)]), ("strong", list(cos2))):
        row = p1_anchors(pairs, heads, ["m"], 0.9, band={"explanation": 0.9, "min_pairs": 1, "membership": membership}).rows[0]
        assert row["law_pairs"] == len(want) and row["law_products"] == 2 * len(want)
        assert row["law_cos2"] == pytest.approx(np.median([cos2[k] for k in want]))
        # the all-strong-pairs columns do not depend on the switch
        assert row["band_pairs"] == 4
    with pytest.raises(ConfigError, match="membership"):
        band_pairs(pairs, sel, 0.9, 0.9, "both")


# ------------------------------------------------------------------ layer-matched AUROC, clustered bootstrap


def test_cluster_bootstrap_resamples_complete_layers():
    # one model, two layers holding {0,0,0} and {1}: resampling layers gives means 0, 1/4... no:
    # complete layers: (0,0,0)+(0,0,0) -> 0, (1)+(1) -> 1, mixed -> 1/4; quantiles 0 and 1.
    vals = np.array([0.0, 0.0, 0.0, 1.0])
    lo, hi = stats.cluster_bootstrap(lambda ix: vals[ix].mean(), [[np.array([0, 1, 2]), np.array([3])]], 4000,
                                     np.random.default_rng(0))
    assert (lo, hi) == (0.0, 1.0)
    # row resampling would give other values: check the replicate set is {0, 1/4, 1}
    seen = set()
    stats.cluster_bootstrap(lambda ix: seen.add(round(vals[ix].mean(), 12)) or 0.0,
                            [[np.array([0, 1, 2]), np.array([3])]], 200, np.random.default_rng(1))
    assert seen == {0.0, 0.25, 1.0}
    # two models: the top level is resampled too
    lo, hi = stats.cluster_bootstrap(lambda ix: vals[ix].mean(), [[np.array([0, 1, 2])], [np.array([3])]], 4000,
                                     np.random.default_rng(2))
    assert (lo, hi) == (0.0, 1.0)


def _latent_heads():
    r = np.random.default_rng(11)
    cols = {k: [] for k in ("model", "layer", "head", "P", "P_latent", "I_D", "split_a", "split_b", "split_w2")}
    for m in ("a", "b"):
        for L in range(3):
            for h in range(8):
                strong = L < 2 and h < 2
                P = 0.95 if strong else r.uniform(0, 0.5)
                PL = r.uniform(0.85, 1.0) if strong else r.uniform(0, 0.95)
                for k, v in (("model", m), ("layer", L), ("head", h), ("P", P), ("P_latent", PL),
                             ("I_D", r.uniform(0.3, 1)), ("split_a", 0.0), ("split_b", 0.0), ("split_w2", 0.0)):
                    cols[k].append(v)
    return {k: np.asarray(v) for k, v in cols.items()}


def test_layer_matched_auroc():
    heads = _latent_heads()
    s = np.ones(heads["P"].size, bool)
    lm = layer_matched(heads, s, 0.9)
    strong = heads["P"] >= 0.9
    for m in ("a", "b"):
        for L in range(3):
            sel = (heads["model"] == m) & (heads["layer"] == L)
            assert lm[sel].sum() == strong[sel].sum()  # as many as strong in the layer (0 in layer 2)
            assert not (lm & strong).any()
    t = p1_latent_closure(heads, ["a", "b"], 0.9, bootstrap=200, large=("a", "b"), pools={"just_b": ["b"]})
    pooled_large = t.rows[-1]
    assert pooled_large["model"] == "pooled large" and pooled_large["matched"] == int(lm.sum())
    assert pooled_large["pooled_models"] == "a, b"
    just_b, b = t.rows[-2], t.rows[1]
    assert just_b["model"] == "pooled just_b" and b["model"] == "b"
    # a pool of one model is that model's row, under its own bootstrap seed
    assert {k: v for k, v in just_b.items() if k not in ("model", "pooled_models") and not k.endswith(("_lo", "_hi"))} \
        == pytest.approx({k: v for k, v in b.items() if k not in ("model", "pooled_models") and not k.endswith(("_lo", "_hi"))},
                         nan_ok=True)
    pos, neg = heads["P_latent"][strong], heads["P_latent"][lm]
    brute = np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg])
    assert pooled_large["auroc_latent_lm"] == pytest.approx(brute)
    assert pooled_large["lat_lm_lo"] <= pooled_large["auroc_latent_lm"] <= pooled_large["lat_lm_hi"]
    allneg = heads["P_latent"][~strong]
    assert t.rows[2]["auroc_latent"] == pytest.approx(np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in allneg]))


def _sweep_heads(flip_layers=(), n_layers=6, models=("a", "b")):
    """Every layer: 3 strong heads (P 0.95) and 5 ordinary (P 0.3), all with P_latent ≥ 0.9 so both
    AUROCs are defined at t = 0.9. Within a layer P_latent and I_D rank strong above ordinary,
    except in the layers of ``flip_layers``, where both orders are reversed: every layer has the
    same within-layer AUROC (1 or 0), so the only variance is between layers."""
    cols = {k: [] for k in ("model", "layer", "head", "P", "P_latent", "I_D", "P_wrong_v")}
    for m in models:
        for L in range(n_layers):
            for h in range(8):
                strong = h < 3
                up = strong != (L in flip_layers)
                for k, v in (("model", m), ("layer", L), ("head", h), ("P", 0.95 if strong else 0.3),
                             ("P_latent", (0.99 if up else 0.92) - 0.001 * h), ("I_D", (0.9 if up else 0.4) - 0.01 * h),
                             ("P_wrong_v", 0.01)):
                    cols[k].append(v)
    out = {k: np.asarray(v) for k, v in cols.items()}
    n = out["P"].size
    out["P_scramble"] = np.empty(n, dtype=object)
    out["P_haar"] = np.empty(n, dtype=object)
    for i in range(n):
        out["P_scramble"][i], out["P_haar"][i] = np.full(2, 0.01), np.full(2, 0.01)
    return out


def _sweep_row(t, model="pooled", t_val=0.9):
    return next(r for r in t.rows if r["model"] == model and r["t"] == t_val)


def test_sweep_intervals_are_layer_clustered_and_widen_with_between_layer_variance():
    models = ["a", "b"]
    same = _sweep_row(p1_threshold_sweep(_sweep_heads(), models, [0.9], bootstrap=400))
    # every layer separates perfectly: every replicate gives 1, the interval is the point
    assert same["auroc_latent"] == same["auroc_ID"] == 1.0
    assert (same["lat_lo"], same["lat_hi"], same["id_lo"], same["id_hi"]) == (1.0, 1.0, 1.0, 1.0)
    widths = []
    for flip in ((0,), (0, 1, 2)):
        row = _sweep_row(p1_threshold_sweep(_sweep_heads(flip), models, [0.9], bootstrap=400))
        # independent point value: the brute-force Mann-Whitney over the pooled heads
        h = _sweep_heads(flip)
        pos, neg = h["P_latent"][h["P"] >= 0.9], h["P_latent"][h["P"] < 0.9]
        assert row["auroc_latent"] == pytest.approx(np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg]))
        assert row["lat_lo"] < row["auroc_latent"] < row["lat_hi"] and row["id_lo"] < row["auroc_ID"] < row["id_hi"]
        widths.append(row["lat_hi"] - row["lat_lo"])
    # half the layers flipped is more between-layer variance than one in six: a wider interval
    assert widths[1] > widths[0] > 0
    # per-model rows get intervals too; none without replicates
    assert np.isfinite(_sweep_row(p1_threshold_sweep(_sweep_heads((0,)), models, [0.9], bootstrap=200), "a")["lat_lo"])
    row0 = _sweep_row(p1_threshold_sweep(_sweep_heads((0,)), models, [0.9]))
    assert all(np.isnan(row0[k]) for k in ("lat_lo", "lat_hi", "id_lo", "id_hi"))
    # complete layers: one model, layer 0 separating, layer 1 reversed. A replicate is {0,0} (AUROC 1),
    # {1,1} (0), each with probability 1/4, or {0,1}: the interval is exactly (0, 1); resampling
    # heads instead would almost never reach either end
    row = _sweep_row(p1_threshold_sweep(_sweep_heads((1,), n_layers=2, models=("a",)), ["a"], [0.9], bootstrap=400), "a")
    assert (row["lat_lo"], row["lat_hi"], row["id_lo"], row["id_hi"]) == (0.0, 1.0, 0.0, 1.0)


def _capacity_cols(spread, n_layers=8, seed=3, layers=None):
    """One model; every layer 2 strong heads (P = 0.9 + δ_L) and 2 matched (P 0.2), capacity
    0.95 + δ_L/4 and 0.9: the closure and capacity gaps vary between layers by δ_L ~ spread.
    ``layers``: instead, (strong P, matched P, strong cap, matched cap) per layer."""
    r = np.random.default_rng(seed)
    cols = {k: [] for k in ("model", "layer", "head", "P", "R", "cap", "E", "is_strong", "is_matched", "is_sample")}
    if layers is None:
        layers = [(0.9 + d, 0.2, 0.95 + d / 4, 0.9) for d in (spread * r.uniform(-1, 1) for _ in range(n_layers))]
    for L, (ps, pm, cs, cm) in enumerate(layers):
        for h, (st, P, cp) in enumerate(((True, ps, cs),) * 2 + ((False, pm, cm),) * 2):
            for k, v in (("model", "m"), ("layer", L), ("head", h), ("P", min(P, 1.0)), ("R", 0.01), ("cap", cp),
                         ("E", 0.5), ("is_strong", st), ("is_matched", not st), ("is_sample", h == 0)):
                cols[k].append(v)
    return {k: np.asarray(v) for k, v in cols.items()}


def test_capacity_gap_intervals_widen_with_between_layer_variance():
    widths = []
    for spread in (0.0, 0.02, 0.08):
        cap = _capacity_cols(spread)
        row = p1_capacity(cap, ["m"], 0.9, bootstrap=400).rows[0]
        st, mt = cap["is_strong"], cap["is_matched"]
        # independent point values: medians of the planted groups
        assert row["closure_gap"] == pytest.approx(np.median(cap["P"][st]) - np.median(cap["P"][mt]))
        assert row["closure_gap_lo"] <= row["closure_gap"] <= row["closure_gap_hi"]
        assert row["cap_gap_lo"] <= row["cap_gap"] <= row["cap_gap_hi"]
        widths.append((row["closure_gap_hi"] - row["closure_gap_lo"], row["cap_gap_hi"] - row["cap_gap_lo"]))
    assert widths[0] == (0.0, 0.0)  # identical layers: every replicate is the point
    assert widths[2][0] > widths[1][0] > 0 and widths[2][1] > widths[1][1] > 0
    assert np.isnan(p1_capacity(_capacity_cols(0.05), ["m"], 0.9).rows[0]["cap_gap_lo"])  # no replicates
    # complete layers: with two layers a replicate is {0,0}, {1,1} (each with probability 1/4, so
    # the 2.5/97.5% quantiles) or {0,1} (gap between them): the interval is exactly the two layers'
    # own gaps. Resampling heads would pair layer 0's strong with layer 1's matched (gap 0.75, 0.5)
    row = p1_capacity(_capacity_cols(0, layers=[(0.95, 0.9, 0.99, 0.98), (0.5, 0.2, 0.9, 0.6)]), ["m"], 0.9,
                           bootstrap=400).rows[0]
    assert (row["closure_gap_lo"], row["closure_gap_hi"]) == pytest.approx((0.05, 0.3))
    assert (row["cap_gap_lo"], row["cap_gap_hi"]) == pytest.approx((0.01, 0.3))


def test_table3_gap_intervals_widen_with_between_layer_variance():
    widths = []
    for spread in (0.0, 0.02, 0.08):
        cap = _capacity_cols(spread)
        row = p1_table3_trajectories(cap, {"m": ["m"]}, 0.9, 400).rows[0]
        assert row["p_lo"] <= row["p_gap"] <= row["p_hi"] and row["c_lo"] <= row["c_gap"] <= row["c_hi"]
        widths.append((row["p_hi"] - row["p_lo"], row["c_hi"] - row["c_lo"]))
    assert widths[0] == pytest.approx((0.0, 0.0), abs=1e-12)
    assert widths[2][0] > widths[1][0] > 0 and widths[2][1] > widths[1][1] > 0


# ------------------------------------------------------------------ rank audit


def test_sv_ratio_and_rank_audit_tolerances():
    r = np.random.default_rng(5)
    D, d = 40, 4
    X = []
    for smin in (1e-3, 1e-8, 1e-13):
        U, _ = np.linalg.qr(r.standard_normal((D, d)))
        W, _ = np.linalg.qr(r.standard_normal((d, d)))
        X.append(U @ np.diag([1.0, 0.5, 0.2, smin]) @ W.T)
    ratio = P1.heads.sv_ratio(np.stack(X))
    np.testing.assert_allclose(ratio, [1e-3, 1e-8, 1e-13], rtol=1e-2)
    heads = {"model": np.array(["m"] * 3), "sv_ratio_O": ratio, "sv_ratio_V": np.full(3, 0.5)}
    fields = {"m": {"d_model": D, "d_head": d}}
    rtol = p1_orientation_rank_audit(heads, fields, ["m"], "rank_rtol", 1e-6).rows[0]
    eps = p1_orientation_rank_audit(heads, fields, ["m"], "eps", 1e-6).rows[0]
    assert rtol["full"] == "4/6" and eps["full"] == "6/6"  # 1e-13 > 40 * 2.2e-16
    assert eps["tol"] == pytest.approx(D * np.finfo(float).eps)
    assert rtol["min_ratio"] == pytest.approx(1e-13, rel=1e-2) and rtol["min_V"] == 0.5
    with pytest.raises(ValueError):
        p1_orientation_rank_audit(heads, fields, ["m"], "bogus", 1e-6)


def test_heads_layer_reports_factor_ratios():
    f = _band_layer()
    heads, _ = P1.heads_layer(f, "m", 0, PARAMS)
    s = [np.linalg.svd(f.W_O[h], compute_uv=False) for h in range(6)]
    np.testing.assert_allclose(heads["sv_ratio_O"], [x[-1] / x[0] for x in s], rtol=1e-10)
    sv = [np.linalg.svd(f.W_V[g].T, compute_uv=False) for g in f.kv_group]
    np.testing.assert_allclose(heads["sv_ratio_V"], [x[-1] / x[0] for x in sv], rtol=1e-10)


def test_cluster_bootstrap_vector_statistic_equals_separate_runs():
    vals = np.array([0.1, 0.4, 0.2, 0.9, 0.5, 0.3])
    cl = [[np.array([0, 1]), np.array([2])], [np.array([3, 4]), np.array([5])]]
    lo, hi = stats.cluster_bootstrap(lambda ix: (vals[ix].mean(), vals[ix].max()), cl, 300, np.random.default_rng(4))
    lo1, hi1 = stats.cluster_bootstrap(lambda ix: vals[ix].mean(), cl, 300, np.random.default_rng(4))
    lo2, hi2 = stats.cluster_bootstrap(lambda ix: vals[ix].max(), cl, 300, np.random.default_rng(4))
    assert (lo[0], hi[0], lo[1], hi[1]) == (lo1, hi1, lo2, hi2)


def test_sweep_aurocs_equal_brute_force_mann_whitney_at_every_threshold():
    """The bootstrap's one-sort AUROCs against explicit pair counting, with ties, NaNs and
    thresholds that empty a class."""
    r = np.random.default_rng(4)
    n = 60
    P, PL, ID = r.uniform(0.5, 1, n), np.round(r.uniform(0.6, 1, n), 1), np.round(r.uniform(0, 1, n), 1)
    P[::9], PL[::7], ID[::5] = np.nan, np.nan, np.nan
    ts = [0.7, 0.8, 0.9, 0.95, 2.0]

    def brute(a, b):
        if not len(a) or not len(b):
            return np.nan
        return np.mean([(x > y) + 0.5 * (x == y) for x in a for y in b])

    got = sweep_aurocs(P, PL, ID, ts)
    want = []
    for t in ts:
        d = np.isfinite(P) & np.isfinite(PL)
        want.append(brute(PL[d & (P >= t)], PL[d & (P < t)]))
        lat = d & (PL >= t) & np.isfinite(ID)
        want.append(brute(ID[lat & (P >= t)], ID[lat & (P < t)]))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert np.isnan(got[-1]) and np.isnan(got[-2])  # t = 2: no strong head
