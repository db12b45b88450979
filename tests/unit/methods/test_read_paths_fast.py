"""Read paths (headgeom.methods.read_paths) of grouped-query layers against per-token and explicit
operator computations: every kind, both norms, both epsilon forms, the writes a post-attention norm
rescales, the projected energy share against an explicit projector and the composition scores
against the unfolded D x D weights (a KV group reader: the mean over its query heads)."""

import numpy as np
import pytest

from headgeom.core.factors import LayerFactors, gqa_map
from headgeom.methods.overlap import reading_matrix
from headgeom.methods.read_paths import layer_pair_terms, read_path_pair, reader_rows, writer_terms
from references import pair_terms_direct

D, d, H, G, N = 16, 3, 4, 2, 25  # GQA: query heads 0, 1 read KV group 0; 2, 3 group 1


def _layer(rng, norm_type):
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                        kv_group=gqa_map(H, G), norm_gain=1 + 0.3 * rng.standard_normal(D), norm_type=norm_type)


def _case(norm_type, seed=0):
    rng = np.random.default_rng(seed)
    fw, fr = _layer(rng, norm_type), _layer(rng, norm_type)
    z = rng.standard_normal((N, H, d)) * np.linspace(0.3, 2.0, d)  # anisotropic mixes
    x = rng.standard_normal((N, D)) * 1.5 + 0.4
    return rng, fw, fr, z, x


def _reader_weights(fr, kind):
    return {"Q": fr.W_Q, "K": fr.W_K, "V": fr.W_V}[kind]


def _query_heads(fr, kind, r):
    return [r] if kind == "Q" else [h for h in range(fr.n_heads) if fr.kv_group[h] == r]


def _composition_ref(fw, fr, kind, j, r):
    """Mean over the reader's query heads of the composition score on the unfolded D x D weights."""
    fro = np.linalg.norm
    OVj = fw.W_O[j] @ fw.W_V[fw.kv_group[j]]
    out = []
    for h in _query_heads(fr, kind, r):
        QK = fr.W_Q[h].T @ fr.W_K[fr.kv_group[h]]
        OVh = fr.W_O[h] @ fr.W_V[fr.kv_group[h]]
        out.append({"Q": fro(QK.T @ OVj) / (fro(QK) * fro(OVj)), "K": fro(QK @ OVj) / (fro(QK) * fro(OVj)),
                    "V": fro(OVh @ OVj) / (fro(OVh) * fro(OVj))}[kind])
    return np.mean(out)


@pytest.mark.parametrize("eps_exact", [True, False])
@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("kind", ["Q", "K", "V"])
@pytest.mark.parametrize("rescaled", [False, True])
def test_gqa_read_paths_match_per_token_and_explicit_operators(kind, norm_type, eps_exact, rescaled):
    rng, fw, fr, z, x = _case(norm_type)
    eps = 0.3  # large enough that kappa = 1 - eps / sigma^2 is far from 1
    O, zw = fw.W_O, z
    if rescaled:  # writes through a post-attention norm: u_tj = gain * P_c O_j z_tj / s_t
        O = (1 + 0.5 * rng.standard_normal(D))[None, :, None] * (O - O.mean(axis=1, keepdims=True))
        zw = z * rng.uniform(0.5, 2.0, N)[:, None, None]
    cols = read_path_pair(fw, zw, fr, x, eps, kind, eps_exact=eps_exact, write_O=O if rescaled else None)
    R = reading_matrix(_reader_weights(fr, kind), fr.norm_gain, norm_type)
    n_read = R.shape[0]
    assert n_read == (H if kind == "Q" else G)
    assert len(cols["writer"]) == H * n_read
    i = 0
    for j in range(H):
        u = zw[:, j] @ O[j].T  # (N, D) the actual writes
        C = u.T @ u / N
        for r in range(n_read):
            assert (cols["writer"][i], cols["reader"][i]) == (j, r)
            lin, nrm = pair_terms_direct(O[j], zw[:, j], R[r], x, norm_type, eps, eps_exact)
            tot = lin + nrm
            assert cols["e_lin"][i] == pytest.approx(np.mean(np.sum(lin * lin, 1)), rel=1e-9)
            assert cols["e_norm"][i] == pytest.approx(np.mean(np.sum(nrm * nrm, 1)), rel=1e-9)
            assert cols["e_cross"][i] == pytest.approx(np.mean(np.sum(lin * nrm, 1)), rel=1e-9)
            assert cols["e_tot"][i] == pytest.approx(np.mean(np.sum(tot * tot, 1)), rel=1e-9)
            P = R[r] @ np.linalg.pinv(R[r])  # projector on the reading space Im R_r
            assert cols["share"][i] == pytest.approx(np.trace(P @ C) / np.trace(C), rel=1e-9)
            assert cols["composition"][i] == pytest.approx(_composition_ref(fw, fr, kind, j, r), rel=1e-9)
            assert cols["rank_writer"][i] == d and cols["rank_reader"][i] == d
            i += 1
    assert set(cols["flags"]) == {""}


def test_eps_exact_changes_the_normalization_term():
    """kappa matters at this epsilon: the two forms differ (the oracle comparison above can fail)."""
    _, fw, fr, z, x = _case("rmsnorm", seed=1)
    a = read_path_pair(fw, z, fr, x, 0.3, "Q", eps_exact=True)
    b = read_path_pair(fw, z, fr, x, 0.3, "Q", eps_exact=False)
    assert np.allclose(a["e_lin"], b["e_lin"], rtol=1e-12)
    assert not np.allclose(a["e_norm"], b["e_norm"], rtol=1e-3)


def test_shared_layer_terms_give_the_single_pair_rows():
    """One writer_terms / layer_pair_terms for every kind (as the job does) equals read_path_pair per kind,
    and reusing them leaves them unchanged."""
    _, fw, fr, z, x = _case("layernorm", seed=2)
    pt = layer_pair_terms(writer_terms(fw, z), fr, x, 0.05)
    for kind in ["V", "Q", "K", "Q"]:
        got, ref = reader_rows(pt, kind), read_path_pair(fw, z, fr, x, 0.05, kind)
        assert got.keys() == ref.keys()
        for k in ref:
            assert got[k].dtype == ref[k].dtype, k
            assert np.array_equal(got[k], ref[k], equal_nan=k != "flags"), k
