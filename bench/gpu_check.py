"""Prepared device check of the torch backend (headgeom.core.backend): the within-layer null sample
(null_factors + orthonormal_bases + pk_within), the PK cross-layer kernel (cross_pairs) and the
closure's Gram GEMMs (Backend.matmul; closure_layer itself has no torch path) at the Qwen2.5-7B and
Qwen3-235B layer shapes, each checked against numpy on the same inputs, with FLOP rates against the
device's measured GEMM rate. The cross-layer null pairs by both routes (stacked-basis blocks and
projector Grams, methods.projectors.projector_gram's slabs as torch GEMMs) in FP64, checked against numpy,
and in FP32 and TF32 with their error against FP64; from the device's measured rates, the projected
one-GPU time of the full (global) Qwen3-235B cross-layer null suite.

    python bench/gpu_check.py [--device cuda|cpu] [--reps N] [--tiny]

--tiny: small shapes (the test's CPU path). Exit status 1 when a check fails."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import baselines as hb
from headgeom.core.backend import Backend
from headgeom.core.seeds import rng_for
from headgeom.methods.nulls import null_spaces
from headgeom.methods.overlap import cross_pairs, factor_stack, orthonormal_bases, pk_within, stacked_heads
from headgeom.methods.projectors import packed_length

TINY = dict(d_model=96, d_head=8, n_heads=8, n_kv=2, n_layers=4)
SUITE_SAMPLES, SUITE_NULLS = 30, 2  # the papers' cross-layer null design: 30 samples of each null


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


def gemm_rate(be, n, reps, dtype="float64"):
    """The device's GEMM rate (n x n @ n x n; float64 or float32)."""
    if be.name == "torch":
        t = be._torch
        A = t.randn(n, n, dtype=getattr(t, dtype), device=be.device)
        dt, _ = timed(be, lambda: A @ A, reps)
    else:
        A = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
        dt, _ = timed(be, lambda: A @ A, reps)
    return 2 * n**3 / dt


def torch_projector_gram(be, W, R, dtype: str):
    """methods.projectors.projector_gram on the device: each slab of both sides packed by one batched GEMM
    (writers' weights as in pack_slab), one GEMM per slab in ``dtype`` (float64, float32, or tf32:
    float32 with TF32 matmuls), summed in float64."""
    from headgeom.methods.projectors import projector_slabs

    t = be._torch
    tdt = t.float64 if dtype == "float64" else t.float32
    Wt = t.as_tensor(np.asarray(W), device=be.device).to(tdt)
    Rt = t.as_tensor(np.asarray(R), device=be.device).to(tdt)
    nw, D, _ = Wt.shape
    PK = t.zeros((nw, Rt.shape[0]), dtype=t.float64, device=be.device)
    for a, b, c, e, _ in projector_slabs(D):
        Pw = t.matmul(Wt[:, a:b, :] * 2, Wt[:, c:e, :].transpose(1, 2))
        if c == a:
            Pw[:, :, :b - a] *= 0.5
        Pr = t.matmul(Rt[:, a:b, :], Rt[:, c:e, :].transpose(1, 2))
        PK += (Pw.reshape(nw, -1) @ Pr.reshape(Rt.shape[0], -1).T).to(t.float64)
    return PK.cpu().numpy()


def _set_tf32(be, on: bool):
    if be.name == "torch" and be.device.startswith("cuda"):
        be._torch.backends.cuda.matmul.allow_tf32 = on


def null_cross_routes(be, nb, name, shape, reps, rtol, g64, g32) -> tuple[int, dict]:
    """Both routes of the cross-layer null pairs on the device: FP64 against numpy, FP32 and TF32
    against FP64; returns (failures, each route's share of the GEMM rate per dtype)."""
    from headgeom.methods.projectors import FLOAT32_RHO_BOUND, projector_gram

    D, d, H = shape["d_model"], shape["d_head"], shape["n_heads"]
    n = min(H, 32)
    W, R = hb.random_bases(n, D, d, 11), hb.random_bases(n, D, d, 12)
    ranks = np.full(n, d)
    ref = projector_gram([W], [R]) / d  # numpy float64 rho
    fails, per_pair = 0, {}
    for dtype in ("float64", "float32", "tf32"):
        _set_tf32(be, dtype == "tf32")
        npdt = np.float64 if dtype == "float64" else np.float32
        Wd, Rd = W.astype(npdt), R.astype(npdt)
        dt_b, got_b = timed(be, lambda: cross_pairs(Wd, ranks, Rd, ranks, angles=False, backend=be), reps)
        dt_p, got_p = timed(be, lambda: torch_projector_gram(be, Wd, Rd, dtype), reps)
        rho_b, rho_p = got_b["rho"].reshape(n, n), got_p / d
        g = g64 if dtype == "float64" else g32
        share_b = 2 * D * d * d * n * n / dt_b / g
        share_p = (2 * packed_length(D) * n * n + 2 * d * packed_length(D) * 2 * n) / dt_p / g
        per_pair[dtype] = {"blocks": share_b, "projectors": share_p}
        if dtype == "float64":
            e = max(relerr(rho_b, ref), relerr(rho_p, ref))
            bad = e > max(rtol, 0) if rtol >= 0 else True
            label = f"rel.err vs numpy {e:.1e}"
        else:
            e = max(np.abs(rho_b - ref).max(), np.abs(rho_p - ref).max())
            bad = dtype == "float32" and (e > FLOAT32_RHO_BOUND or rtol < 0)
            label = f"rho abs.err vs FP64 {e:.1e}" + (f" (bound {FLOAT32_RHO_BOUND:.0e})" if dtype == "float32" else "")
        fails += bad
        print(f"{name} null cross pairs {dtype}: blocks {dt_b * 1e3:.1f} ms ({share_b:.0%} of GEMM), projector Gram "
              f"{dt_p * 1e3:.1f} ms ({share_p:.0%}); {label}{' FAILED' if bad else ''}")
    _set_tf32(be, False)
    return fails, per_pair


def draw_seconds(be, shape, reps) -> float:
    """Seconds of one layer's null draws and bases on the device, O, Q, K and V, the mean of the
    rotation and the reassignment null."""
    f = hb.synthetic_layer(**shape, seed=302)
    total = 0.0
    for null in ("rotation", "reassign"):
        for kind in ("O", "Q", "K", "V"):
            X = stacked_heads(factor_stack(f, kind))
            dt, _ = timed(be, lambda: null_spaces(X, null, rng_for("gpu-check", kind, 0), backend=be),
                          max(1, reps - 1))
            total += dt
    return total / 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-8)
    a = ap.parse_args(argv)
    tb = Backend("torch", a.device)
    if a.device == "cpu":
        tb._torch.set_num_threads(1)  # what a CPU job gets (one BLAS thread), and steady timings on a shared machine
    nb = Backend("numpy", "cpu")
    shapes = {"tiny": TINY} if a.tiny else {"qwen2.5-7b": hb.QWEN25_7B, "qwen3-235b": hb.QWEN3_235B}
    g = gemm_rate(tb, 256 if a.tiny else 4096, a.reps)
    g32 = gemm_rate(tb, 256 if a.tiny else 4096, a.reps, "float32")
    print(f"device {a.device}: float64 GEMM {g / 1e9:.1f} GFLOP/s, float32 {g32 / 1e9:.1f} GFLOP/s")
    projection = {}
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
            B, r = null_spaces(X, "rotation", rng_for("gpu-check", name, 0), backend=be)
            return pk_within(B, r, backend=be, angles="min")  # as pk_null_within_job

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
        bad, per_pair = null_cross_routes(tb, nb, name, shape, a.reps, a.rtol, g, g32)
        fails += bad
        projection[name] = (shape, per_pair, draw_seconds(tb, shape, a.reps) if name == "qwen3-235b" else 0.0)
    # the global Qwen3-235B cross-layer null suite on one device: every layer pair of 30 samples of
    # both nulls by the cheaper route (its FLOPs at the share of the GEMM rate measured at the largest
    # shape checked), and each layer's draws once per sample and null (measured at 235B shape only)
    name, (shape, shares, draw) = list(projection.items())[-1]
    big = hb.QWEN3_235B
    L, D, d, H, G = big["n_layers"], big["d_model"], big["d_head"], big["n_heads"], big["n_kv"]
    pairs = H * (H + 2 * G)
    flops = {"blocks": 2 * D * d * d * pairs,
             "projectors": 2 * packed_length(D) * pairs + 2 * d * packed_length(D) * (2 * H + 2 * G)}
    draws = L * draw if name == "qwen3-235b" else 0.0
    for dtype, share in shares.items():
        rate = g if dtype == "float64" else g32
        t = {r: flops[r] / (share[r] * rate) for r in flops}
        route = min(t, key=t.get)
        total = SUITE_SAMPLES * SUITE_NULLS * (L * (L - 1) // 2 * t[route] + draws)
        print(f"projected one-device time of the Qwen3-235B cross-layer null suite ({SUITE_SAMPLES} samples x "
              f"{SUITE_NULLS} nulls, {L * (L - 1) // 2} layer pairs), {dtype}, at the shares measured at {name}: "
              f"{total / 3600:.2f} h by {route} (a layer pair: blocks {t['blocks']:.3g} s, projectors "
              f"{t['projectors']:.3g} s; draws " + (f"{draw:.3g} s a layer)" if draws else "not measured at this shape)"))
    print("OK" if not fails else f"{fails} check(s) FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
