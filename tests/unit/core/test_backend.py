"""backend: torch (float64, CPU) runs the same kernels as numpy to 1e-12 relative; a CUDA device
without a GPU is a clear ConfigError."""

import numpy as np
import pytest

from headgeom.core.backend import Backend, backend_from
from headgeom.core.errors import ConfigError, HeadgeomError
from headgeom.core.factors import LayerFactors, gqa_map
from headgeom.methods.grams import LayerGrams
from headgeom.methods.nulls import null_factors
from headgeom.methods.overlap import cross_pairs, orthonormal_bases, pk_within

TORCH = Backend("torch", "cpu")


def layer(seed, D=96, d=8, H=6, G=2):
    rng = np.random.default_rng(seed)
    return LayerFactors(W_Q=rng.standard_normal((H, d, D)), W_K=rng.standard_normal((G, d, D)),
                        W_V=rng.standard_normal((G, d, D)), W_O=rng.standard_normal((H, D, d)),
                        kv_group=gqa_map(H, G), norm_gain=None, norm_type="none")


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_torch_cpu_grams_equal_numpy():
    f = layer(1)
    a, b = LayerGrams(f, backend=TORCH), LayerGrams(f)
    for k in ("A", "B", "M_own", "M_wrong", "M_full", "C"):
        assert rel(getattr(a, k), getattr(b, k)) < 1e-12, k
    assert a.A.dtype == np.float64


def test_torch_cpu_null_kernels_equal_numpy():
    f, g = layer(2), layer(3)
    Xw = null_factors(f.W_O, "rotation", np.random.default_rng(0))
    Xr = null_factors(np.swapaxes(g.W_Q, -1, -2), "rotation", np.random.default_rng(1))
    Bt, rt = orthonormal_bases(Xw, backend=TORCH)
    Bn, rn = orthonormal_bases(Xw)
    assert rel(Bt, Bn) < 1e-12 and (rt == rn).all()
    Ct, Cn = orthonormal_bases(Xr, backend=TORCH), orthonormal_bases(Xr)
    wt, wn = pk_within(Bt, rt, TORCH), pk_within(Bn, rn)
    assert rel(wt["rho"], wn["rho"]) < 1e-12
    xt = cross_pairs(Bt, rt, *Ct, Xw=Xw, Xr=Xr, backend=TORCH)
    xn = cross_pairs(Bn, rn, *Cn, Xw=Xw, Xr=Xr)
    for k in ("rho", "weighted"):
        assert rel(xt[k], xn[k]) < 1e-12, k
    # and it is a different computation (a backend that ignored the request would pass the above)
    import torch

    calls = []
    real = torch.Tensor.__matmul__
    torch.Tensor.__matmul__ = lambda a, b: (calls.append(1), real(a, b))[1]
    try:
        orthonormal_bases(Xw, backend=TORCH)
    finally:
        torch.Tensor.__matmul__ = real
    assert len(calls) == 4


def test_cuda_without_a_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA GPU") as e:
        backend_from({"backend": "torch", "device": "cuda"})
    assert isinstance(e.value, HeadgeomError)
    with pytest.raises(ConfigError, match="needs backend: torch"):
        Backend("numpy", "cuda")
    with pytest.raises(ConfigError, match="not one of"):
        Backend("jax")
