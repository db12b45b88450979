"""How well float64 fixes the rotation null's within-layer statistics: the previous code path
(haar_stiefel formed, then one GEMM S @ O) with that GEMM done by numpy/OpenBLAS and by
torch/MKL, against the current path (reflectors applied, nulls.rotate_spectrum).

    .venv/bin/python bench/null_sd_resolution.py results/tensors/gemma3-270m 5

Prints, per kind and sample, SD/mean and the relative change of the SD and of the min angle:
another BLAS for one GEMM moves them as much as the restructured kernel does (docs/performance.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headgeom.core.seeds import rng_for  # noqa: E402
from headgeom.io.store import TensorStore  # noqa: E402
from headgeom.methods import nulls as N  # noqa: E402
from headgeom.methods import overlap  # noqa: E402


def previous(S, rng, mm):
    D, m = S.shape
    if m <= D:
        return mm(S, N.haar_stiefel(m, m, rng))
    L = np.linalg.qr(S.T, mode="r").T
    return mm(L, N.haar_stiefel(m, D, rng).T)


def main(store_dir: str, layer: int, samples: int = 6) -> None:
    torch.set_num_threads(1)
    store = TensorStore(store_dir)
    model = store.manifest["model"]
    f = store.layer_factors(layer)
    iso = overlap.isotropic_rho(f.d_head, f.d_model)
    np_mm = lambda a, b: a @ b  # noqa: E731
    t_mm = lambda a, b: (torch.from_numpy(np.ascontiguousarray(a)) @ torch.from_numpy(np.ascontiguousarray(b))).numpy()  # noqa: E731
    for kind in ("O", "Q", "K", "V"):
        X = overlap.factor_stack(f, kind)
        if X.shape[0] < 2:
            continue
        for s in range(samples):
            def rng():
                return rng_for(model, "null-within", "rotation", kind, layer, s)
            st = {}
            for name, Xn in (("prev", N.unstack(previous(N.stack(X), rng(), np_mm), X.shape[0])),
                             ("prev_mkl", N.unstack(previous(N.stack(X), rng(), t_mm), X.shape[0])),
                             ("new", N.null_factors(X, "rotation", rng()))):
                r = overlap.pk_within(*overlap.orthonormal_bases(Xn))
                st[name] = overlap.layer_stats(r["rho"], r["min_angle_deg"], iso)

            def rel(a, k):
                return abs(st[a][k] - st["prev"][k]) / abs(st["prev"][k])
            print(f"{kind} sample {s}: SD/mean {st['prev']['sd'] / st['prev']['mean']:.1e}; SD rel. change: "
                  f"previous with MKL GEMM {rel('prev_mkl', 'sd'):.1e}, new {rel('new', 'sd'):.1e}; min angle: "
                  f"{rel('prev_mkl', 'min_angle_deg'):.1e}, {rel('new', 'min_angle_deg'):.1e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(x) for x in sys.argv[3:4]))
