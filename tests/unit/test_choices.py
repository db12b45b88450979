"""Switches of the reconstructed choices (issue 13 item 5): each alternative checked against an
independent computation, the default leaves the columns untouched, and the sensitivity table
names exactly the claims an alternative moves."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from headgeom.core.errors import ConfigError
from headgeom.core.factors import LayerFactors
from headgeom.methods import closure as C
from headgeom.methods.paper1.factorial import contrasts
from headgeom.reports import choices as CH


def _factors(H=4, G=2, D=24, d=6, seed=0):
    r = np.random.default_rng(seed)
    return LayerFactors(W_Q=r.standard_normal((H, d, D)), W_K=r.standard_normal((G, d, D)),
                        W_V=r.standard_normal((G, d, D)), W_O=r.standard_normal((H, D, d)),
                        kv_group=np.arange(H) // (H // G), norm_gain=np.ones(D), norm_type="rmsnorm")


def test_isotropy_min_max_from_principal_angles():
    """I_D_minmax = cos(largest principal angle) / cos(smallest) between span O_h and span V_g
    (scipy's subspace angles, not headgeom's principal coordinates)."""
    f = _factors()
    out = C.closure_layer(f)
    for h in range(4):
        ang = subspace_angles(f.W_O[h], f.W_V[f.kv_group[h]].T)
        assert out["I_D_minmax"][h] == pytest.approx(np.cos(ang.max()) / np.cos(ang.min()), rel=1e-9)
        cos = np.cos(ang)
        assert out["I_D"][h] == pytest.approx(cos.sum() ** 2 / (6 * (cos ** 2).sum()), rel=1e-9)


def test_factorial_contrasts_by_explicit_loops():
    S = np.random.default_rng(3).random((5, 5))
    got = contrasts(S)
    n = 5
    for h in range(n):
        off_row = np.mean([S[h, j] for j in range(n) if j != h])
        off_col = np.mean([S[i, h] for i in range(n) if i != h])
        rest = np.mean([S[i, j] for i in range(n) for j in range(n) if i != h and j != h])
        assert got["row"][h] == pytest.approx(S[h, h] - off_row)
        assert got["column"][h] == pytest.approx(S[h, h] - off_col)
        assert got["interaction"][h] == pytest.approx(S[h, h] - off_row - off_col + rest)


def test_apply_picks_the_alternative_columns_and_default_is_identity():
    cols = {"g_T": np.array([1.0, 2.0]), "alpha": np.array([-0.5, 3.0]), "I_D": np.array([0.9, 0.8]),
            "I_D_minmax": np.array([0.3, 0.2]), "I_factorial": np.array([0.1, 0.2]),
            "I_factorial_ctrl": np.array([0.0, 0.0]), "I_factorial_row": np.array([1.0, 1.1]),
            "I_factorial_ctrl_row": np.array([2.0, 2.1]), "I_factorial_column": np.array([3.0, 3.1]),
            "I_factorial_ctrl_column": np.array([4.0, 4.1])}
    assert CH.apply(cols, CH.DEFAULTS) is cols
    out = CH.apply(cols, {"return_gain": "fitted", "isotropy": "min_max", "factorial_contrast": "column"})
    assert out["g_T"].tolist() == [0.5, 3.0] and out["I_D"].tolist() == [0.3, 0.2]
    assert out["I_factorial"].tolist() == [3.0, 3.1] and out["I_factorial_ctrl"].tolist() == [4.0, 4.1]
    assert cols["g_T"].tolist() == [1.0, 2.0]  # the input is not changed
    with pytest.raises(ConfigError, match="choices.isotropy"):
        CH.apply(cols, {"isotropy": "nope"})
    with pytest.raises(ConfigError, match="rerun the paper1_heads"):
        CH.apply({"g_T": cols["g_T"], "alpha": cols["alpha"]}, {"isotropy": "min_max"})
