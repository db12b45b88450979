"""Activation-stage math (docs/methods.md §3) against independent computations: explicit operators,
finite differences through torch's / transformers' own norm modules, and direct per-token loops."""

import numpy as np
import pytest
import torch

from headgeom.methods.natural_return import head_return, layer_return, population
from headgeom.methods.read_paths import composition, norm_stats, read_path_pair
from headgeom.core.factors import LayerFactors, gqa_map
from headgeom.methods.overlap import reading_matrix
from references import jvp, pair_terms_direct


def closed_O(V, alpha):
    return V @ np.linalg.inv(V.T @ V) * alpha


# ------------------------------------------------------------------ natural return


@pytest.mark.parametrize("alpha", [1.7, -0.6])
@pytest.mark.parametrize("endpoint", ["pooled", "median_cos2"])
def test_exactly_closed_head_alignment_one_and_gain_alpha(alpha, endpoint):
    rng = np.random.default_rng(0)
    D, d, N = 40, 6, 200
    V = rng.standard_normal((D, d))
    O = closed_O(V, alpha)
    # T^2 = alpha T exactly, full rank: any text (here heavy-tailed anisotropic z)
    Z = rng.standard_t(3, (N, d)) * np.linspace(0.1, 5, d)
    T = O @ V.T
    assert np.allclose(T @ T, alpha * T)
    a, g = head_return(O, V, Z, endpoint)
    assert a == pytest.approx(1.0, abs=1e-10)
    assert g == pytest.approx(abs(alpha), rel=1e-10)


def test_natural_return_matches_explicit_operator():
    rng = np.random.default_rng(1)
    D, d, N = 30, 5, 80
    O, V = rng.standard_normal((D, d)), rng.standard_normal((D, d))
    Z = rng.standard_normal((N, d)) @ rng.standard_normal((d, d))
    T = O @ V.T
    Y = Z @ O.T  # y_t = O z_t (rows)
    TY = Y @ T.T
    ref_a = np.sum(Y * TY) ** 2 / (np.sum(Y * Y) * np.sum(TY * TY))
    ref_g = np.sqrt(np.sum(TY * TY) / np.sum(Y * Y))
    a, g = head_return(O, V, Z, "pooled")
    assert a == pytest.approx(ref_a, rel=1e-10) and g == pytest.approx(ref_g, rel=1e-10)
    cos2 = np.sum(Y * TY, 1) ** 2 / (np.sum(Y * Y, 1) * np.sum(TY * TY, 1))
    a2, _ = head_return(O, V, Z, "median_cos2")
    assert a2 == pytest.approx(np.median(cos2), rel=1e-10)


def test_layer_return_wrong_v_uses_next_group():
    rng = np.random.default_rng(2)
    D, d, H, G = 24, 4, 4, 2
    WV = rng.standard_normal((G, d, D))
    WO = rng.standard_normal((H, D, d))
    kv = gqa_map(H, G)
    WO[0] = closed_O(WV[kv[0]].T, 2.0)
    f = LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)), W_V=WV, W_O=WO,
                     kv_group=kv, norm_gain=None, norm_type="rmsnorm")
    z = rng.standard_normal((50, H, d))
    cols = layer_return(f, z)
    assert cols["align"][0] == pytest.approx(1.0, abs=1e-10) and cols["g_y"][0] == pytest.approx(2.0)
    a_w, g_w = head_return(WO[0], WV[(kv[0] + 1) % G].T, z[:, 0])
    assert cols["align_wrong_v"][0] == pytest.approx(a_w) and cols["align_wrong_v"][0] < 0.9
    # MQA: wrong-V undefined -> NaN + flag
    f1 = LayerFactors(W_Q=f.W_Q, W_K=f.W_K[:1], W_V=WV[:1], W_O=WO, kv_group=np.zeros(H, int), norm_gain=None,
                      norm_type="rmsnorm")
    c1 = layer_return(f1, z)
    assert np.isnan(c1["align_wrong_v"]).all() and not c1["wrong_v_defined"].any()


def test_population_pairs_within_eligible_layers():
    P = np.array([0.99, 0.1, 0.2, 0.95, 0.5, 0.3, 0.05, 0.97, 0.6, 0.4])
    layer = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    hi, lo, elig = population(P, layer, high_q=0.7, low_q=0.3)
    assert (layer[hi] == layer[lo]).all()
    assert set(elig) == {0, 2} and len(hi) == len(lo) == 2  # layer 1 has no low head at q=0.3
    assert P[hi].min() >= np.quantile(P, 0.7) and P[lo].max() <= np.quantile(P, 0.3)


def test_population_trims_to_strongest_high_and_weakest_low_heads():
    """A layer with more high heads than low keeps its strongest high heads; a layer with more
    low heads than high keeps its weakest low heads (heads listed out of P order, so neither
    index order nor a reversed sort passes)."""
    P = np.array([0.7, 0.9, 0.05, 0.8, 0.2, 0.95, 0.01, 0.1, 0.4, 0.45, 0.5, 0.55])
    layer = np.repeat([0, 1, 2], 4)
    # thresholds: high >= quantile 0.7 (0.655) -> {0.7, 0.8, 0.9, 0.95}; low <= quantile 0.3 (0.26)
    hi, lo, elig = population(P, layer, high_q=0.7, low_q=0.3)
    assert list(elig) == [0, 1]  # layer 2 has neither
    # layer 0: three high heads (0.7, 0.9, 0.8), one low (0.05) -> the 0.9 head alone
    # layer 1: one high head (0.95), three low (0.2, 0.01, 0.1) -> the 0.01 head alone
    assert list(hi) == [1, 5] and list(lo) == [2, 6]
    # three high heads (0.9, 0.8, 0.7) against two low (0.01, 0.05): the pairs run strongest with weakest
    P2 = np.array([0.7, 0.9, 0.05, 0.8, 0.01, 0.3, 0.4, 0.45, 0.5, 0.55])
    hi2, lo2, _ = population(P2, np.repeat([0, 1], 5), high_q=0.7, low_q=0.2)
    assert list(P2[hi2]) == [0.9, 0.8] and list(P2[lo2]) == [0.01, 0.05]


# ------------------------------------------------------------------ norm Jacobian


def _fd(fn, x, u, h=1e-6):
    return (fn(x + h * u) - fn(x - h * u)) / (2 * h)


@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_jacobian_layernorm_matches_finite_differences(eps):
    rng = np.random.default_rng(3)
    D = 16
    ln = torch.nn.LayerNorm(D, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(torch.as_tensor(1 + 0.3 * rng.standard_normal(D)))
        ln.bias.copy_(torch.as_tensor(rng.standard_normal(D)))
    x, u = rng.standard_normal(D) * 0.5 + 0.2, rng.standard_normal(D)
    f = lambda v: ln(torch.as_tensor(v)).detach().numpy()
    lin, nrm = jvp(x, u, ln.weight.detach().numpy(), "layernorm", eps)
    assert np.allclose(lin + nrm, _fd(f, x, u), rtol=1e-7, atol=1e-9)
    # the eps = 0 form (kappa = 1) is measurably off at large eps: the test can fail
    lin0, nrm0 = jvp(x, u, ln.weight.detach().numpy(), "layernorm", eps, eps_exact=False)
    assert (np.max(np.abs(lin0 + nrm0 - _fd(f, x, u))) > 1e-4) == (eps > 0.1)


@pytest.mark.parametrize("eps", [1e-6, 0.2])
def test_jacobian_rmsnorm_of_transformers_matches_finite_differences(eps):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    rng = np.random.default_rng(4)
    D = 12
    norm = LlamaRMSNorm(D, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(torch.as_tensor(1 + 0.2 * rng.standard_normal(D)))
    x, u = rng.standard_normal(D), rng.standard_normal(D)
    f = lambda v: norm(torch.as_tensor(v)[None]).detach().numpy()[0]
    lin, nrm = jvp(x, u, norm.weight.detach().numpy(), "rmsnorm", norm.variance_epsilon)
    # transformers' RMSNorm computes in float32 whatever the input dtype: a wider step
    assert np.allclose(lin + nrm, _fd(f, x, u, h=1e-2), rtol=1e-3, atol=1e-4)
    lin0, nrm0 = jvp(x, u, norm.weight.detach().numpy(), "rmsnorm", norm.variance_epsilon, eps_exact=False)
    assert np.allclose(lin0 + nrm0, _fd(f, x, u, h=1e-2), rtol=1e-3, atol=1e-4) == (eps < 1e-3)


def test_jacobian_gemma_rmsnorm_gain_is_one_plus_w():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    rng = np.random.default_rng(5)
    D = 10
    norm = Gemma3RMSNorm(D, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.as_tensor(0.3 * rng.standard_normal(D)))
    x, u = rng.standard_normal(D), rng.standard_normal(D)
    f = lambda v: norm(torch.as_tensor(v)[None]).detach().numpy()[0]
    lin, nrm = jvp(x, u, 1 + norm.weight.detach().numpy(), "rmsnorm", norm.eps)
    assert np.allclose(lin + nrm, _fd(f, x, u, h=1e-2), rtol=1e-3, atol=1e-4)
    lin_w, nrm_w = jvp(x, u, norm.weight.detach().numpy(), "rmsnorm", norm.eps)  # forgetting the +1
    assert not np.allclose(lin_w + nrm_w, _fd(f, x, u, h=1e-2), rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ read paths


def _layer(rng, D=20, H=3, G=3, d=4, norm_type="layernorm"):
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                        kv_group=gqa_map(H, G), norm_gain=1 + 0.2 * rng.standard_normal(D), norm_type=norm_type)


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm", "none"])
@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_read_path_energies_match_per_token_loop(norm_type, kind):
    rng = np.random.default_rng(6)
    fw, fr = _layer(rng, norm_type=norm_type), _layer(rng, G=1 if kind != "Q" else 3, norm_type=norm_type)
    N = 30
    z = rng.standard_normal((N, fw.n_heads, fw.d_head))
    x = rng.standard_normal((N, fw.d_model)) * 2 + 0.5
    eps = 0.05
    cols = read_path_pair(fw, z, fr, x, eps, kind)
    R = reading_matrix({"Q": fr.W_Q, "K": fr.W_K, "V": fr.W_V}[kind], fr.norm_gain, fr.norm_type)
    i = 0
    for j in range(fw.n_heads):
        for h in range(R.shape[0]):
            lin, nrm = pair_terms_direct(fw.W_O[j], z[:, j], R[h], x, norm_type, eps)
            tot = lin + nrm
            e_lin, e_nrm, e_tot = (np.mean(np.sum(v * v, 1)) for v in (lin, nrm, tot))
            assert cols["writer"][i] == j and cols["reader"][i] == h
            assert cols["e_lin"][i] == pytest.approx(e_lin, rel=1e-9)
            # linear + normalization = total
            assert cols["e_tot"][i] == pytest.approx(e_tot, rel=1e-9)
            if norm_type != "none":
                assert cols["e_norm"][i] == pytest.approx(e_nrm, rel=1e-9, abs=1e-14)
                assert cols["e_cross"][i] == pytest.approx(np.mean(np.sum(lin * nrm, 1)), rel=1e-9, abs=1e-14)
            i += 1
    if norm_type == "none":  # no pre-attention norm: the split is not measured (NaN + flag), never 0 / 1
        for k in ("e_norm", "e_cross", "ratio_lin_tot", "rel_rms", "cross_sign"):
            assert np.isnan(cols[k]).all(), k
        assert set(cols["flags"]) == {"no_pre_norm_read_path"}
    else:
        for k in ("e_norm", "e_cross", "ratio_lin_tot", "rel_rms", "cross_sign"):
            assert np.isfinite(cols[k]).all(), k
        assert set(cols["flags"]) == {""}


def test_total_equals_models_first_order_response():
    """A J(x) u from the formulas equals the finite-difference change of W diag(gamma) N(x) read
    through a real LayerNorm module, so linear + normalization is the reader's whole response."""
    rng = np.random.default_rng(7)
    D, d = 18, 3
    ln = torch.nn.LayerNorm(D, eps=1e-5, dtype=torch.float64, elementwise_affine=True)
    g = 1 + 0.2 * rng.standard_normal(D)
    with torch.no_grad():
        ln.weight.copy_(torch.as_tensor(g))
    W = rng.standard_normal((d, D))
    x, u = rng.standard_normal(D), rng.standard_normal(D)
    read = lambda v: W @ ln(torch.as_tensor(v)).detach().numpy()
    R = reading_matrix(W[None], g, "layernorm")[0]
    lin, nrm = pair_terms_direct(np.eye(D), u[None], R, x[None], "layernorm", 1e-5)
    assert np.allclose(lin[0] + nrm[0], _fd(read, x, u), rtol=1e-7, atol=1e-9)


def test_share_equals_rho_for_isotropic_writes():
    """C isotropic on U = Im O_j: tr(P_V C)/tr C = rho (and it lies within [cos^2 theta_m, cos^2 theta_1])."""
    rng = np.random.default_rng(8)
    D, d, H = 24, 4, 2
    fw = _layer(rng, D=D, H=H, G=H, d=d, norm_type="rmsnorm")
    fr = _layer(rng, D=D, H=H, G=H, d=d, norm_type="rmsnorm")
    # z with E[u u^T] = c P_U exactly: u = O z; choose z = O^+ (Q_U w) with w spanning exact isotropy
    N = 4 * d
    z = np.zeros((N, H, d))
    for j in range(H):
        Q, _ = np.linalg.qr(fw.W_O[j])
        W = np.concatenate([np.eye(d), -np.eye(d), np.eye(d), -np.eye(d)])  # exact isotropic design
        z[:, j] = (np.linalg.pinv(fw.W_O[j]) @ (Q @ W.T)).T
    x = rng.standard_normal((N, D))
    cols = read_path_pair(fw, z, fr, x, 1e-6, "Q")
    assert np.allclose(cols["share"], cols["rho"], rtol=1e-10)
    # anisotropic writes move the share away from rho (the test can fail)
    z2 = z * np.array([5.0, 1, 1, 0.2])[None, None, :]
    cols2 = read_path_pair(fw, z2 @ np.eye(d), fr, x, 1e-6, "Q")
    assert not np.allclose(cols2["share"], cols2["rho"], rtol=1e-3)
    # explicit projector check of rho for one pair
    Uq, _ = np.linalg.qr(fw.W_O[0])
    Vq, _ = np.linalg.qr(reading_matrix(fr.W_Q, fr.norm_gain, "rmsnorm")[1])
    assert cols["rho"][1] == pytest.approx(np.trace(Uq @ Uq.T @ Vq @ Vq.T) / d, rel=1e-10)


def test_composition_scores_match_explicit_operators():
    rng = np.random.default_rng(9)
    fw, fr = _layer(rng, D=14, H=2, G=2, d=3), _layer(rng, D=14, H=2, G=2, d=3)
    fro = np.linalg.norm
    for kind in "QKV":
        c = composition(fw, fr, kind)
        for j in range(2):
            OVj = fw.W_O[j] @ fw.W_V[j]
            for h in range(2):
                QK = fr.W_Q[h].T @ fr.W_K[h]
                OVh = fr.W_O[h] @ fr.W_V[h]
                ref = {"Q": fro(QK.T @ OVj) / (fro(QK) * fro(OVj)), "K": fro(QK @ OVj) / (fro(QK) * fro(OVj)),
                       "V": fro(OVh @ OVj) / (fro(OVh) * fro(OVj))}[kind]
                assert c[j, h] == pytest.approx(ref, rel=1e-10)


def test_norm_stats_sigma_is_the_models():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((5, 9))
    s, xh, k = norm_stats(x, "layernorm", 1e-3)
    ref = np.sqrt(x.var(axis=1) + 1e-3)
    assert np.allclose(s, ref)
    assert np.allclose(np.linalg.norm(xh, axis=1), 1) and np.allclose(xh.sum(1), 0)
