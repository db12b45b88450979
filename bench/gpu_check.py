"""Prepared device check of the torch backend (headgeom.core.backend): the within-layer null sample
(null_factors + orthonormal_bases + pk_within), the PK cross-layer kernel (cross_pairs) and the
closure's Gram GEMMs (Backend.matmul; closure_layer itself has no torch path) at the Qwen2.5-7B and
Qwen3-235B layer shapes, each checked against numpy on the same inputs, with FLOP rates against the
device's measured GEMM rate.

    python bench/gpu_check.py [--device cuda|cpu] [--reps N] [--tiny]

--tiny: small shapes (the test's CPU path). Exit status 1 when a check fails."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import baselines as hb  # noqa: E402
from headgeom.core.backend import Backend  # noqa: E402
from headgeom.core.seeds import rng_for  # noqa: E402
from headgeom.methods.nulls import null_factors  # noqa: E402
from headgeom.methods.pk import cross_pairs, factor_stack, orthonormal_bases, pk_within, stacked_heads  # noqa: E402

TINY = dict(d_model=96, d_head=8, n_heads=8, n_kv=2)


def _sync(be):
    if be.name == "torch" and be.device.startswith("cuda"):
        be._torch.cuda.synchronize()


def timed(be, fn, reps):
    fn()  # warm-up
    _sync(be)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        _sync(be)
        best = min(best, time.perf_counter() - t0)
    return best, out


def relerr(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok])) / max(np.max(np.abs(b[ok])), 1e-300)) if ok.any() else 0.0


def gemm_rate(be, n, reps):
    """The device's GEMM rate (float64, n x n @ n x n)."""
    if be.name == "torch":
        t = be._torch
        A = t.randn(n, n, dtype=t.float64, device=be.device)
        dt, _ = timed(be, lambda: A @ A, reps)
    else:
        A = np.random.default_rng(0).standard_normal((n, n))
        dt, _ = timed(be, lambda: A @ A, reps)
    return 2 * n**3 / dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-8)
    a = ap.parse_args(argv)
    tb = Backend("torch", a.device)
    nb = Backend("numpy", "cpu")
    shapes = {"tiny": TINY} if a.tiny else {"qwen2.5-7b": hb.QWEN25_7B, "qwen3-235b": hb.QWEN3_235B}
    g = gemm_rate(tb, 256 if a.tiny else 4096, a.reps)
    print(f"device {a.device}: float64 GEMM {g / 1e9:.1f} GFLOP/s")
    fails = 0
    for name, shape in shapes.items():
        D, d, H = shape["d_model"], shape["d_head"], shape["n_heads"]
        f = hb.synthetic_layer(**shape, seed=300)
        # closure Grams: per head O^T O (d x d over D) as stacked GEMMs
        O = np.ascontiguousarray(f.W_O)  # (H, D, d)
        Ot = np.ascontiguousarray(np.swapaxes(O, -1, -2))
        fl = 2 * H * d * d * D
        dt, got = timed(tb, lambda: tb.matmul(Ot, O), a.reps)
        e = relerr(got, Ot @ O)
        fails += e > a.rtol
        print(f"{name} closure Grams: {dt * 1e3:.1f} ms, {fl / dt / g:.0%} of GEMM, rel.err {e:.1e}")
        # within-layer null sample (kind O)
        X = stacked_heads(factor_stack(f, "O"))

        def null_sample(be):
            Xn = null_factors(X, "rotation", rng_for("gpu-check", name, 0), backend=be)
            B, r = orthonormal_bases(Xn, backend=be)
            return pk_within(B, r, backend=be)

        dt, got = timed(tb, lambda: null_sample(tb), a.reps)
        ref = null_sample(nb)
        e = max(relerr(got[k], ref[k]) for k in ref if np.asarray(ref[k]).dtype.kind == "f")
        fails += e > a.rtol
        print(f"{name} null sample (rotation, O): {dt * 1e3:.1f} ms, rel.err {e:.1e}")
        # PK cross pairs (writer O of one layer, reader Q of another)
        f2 = hb.synthetic_layer(**shape, seed=301)
        Bw, rw = orthonormal_bases(stacked_heads(factor_stack(f, "O")))
        Br, rr = orthonormal_bases(stacked_heads(factor_stack(f2, "Q")))
        fl = hb.cross_pairs_flops(D, H, H, d, weighted=False)["total"]
        dt, got = timed(tb, lambda: cross_pairs(Bw, rw, Br, rr, backend=tb), a.reps)
        ref = cross_pairs(Bw, rw, Br, rr, backend=nb)
        e = max(relerr(got[k], ref[k]) for k in ref if np.asarray(ref[k]).dtype.kind == "f")
        fails += e > a.rtol
        print(f"{name} PK cross pairs (O -> Q): {dt * 1e3:.1f} ms, {fl / dt / g:.0%} of GEMM, rel.err {e:.1e}")
    print("OK" if not fails else f"{fails} check(s) FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
