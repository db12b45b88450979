"""``make bench`` sections ``nulls``, ``null_cross`` and ``stages``: null samples per second, the
cross-layer null pairs' two routes, and each heavy stage's FLOP rate as a share of the same run's GEMM rate."""

from __future__ import annotations

import os
import time

import numpy as np

import baselines as hb

from .common import log


def bench_nulls(args) -> dict:
    from headgeom.methods.nulls import null_factors
    from headgeom.methods.overlap import factor_stack, orthonormal_bases, pk_within, stacked_heads
    from headgeom.core.seeds import rng_for

    out = {"what": "one within-layer null sample of a layer = null_factors + orthonormal_bases + pk_within for each "
                   "kind O, Q, K, V (as pk_null_within_job, its heads stacked once per kind); kinds with the same "
                   "factor shape are timed once (Q as O, V as K)", "shapes": {}}
    for name, shape in (("qwen2.5-7b", hb.QWEN25_7B), ("qwen3-235b", hb.QWEN3_235B)):
        f = hb.synthetic_layer(**shape, seed=200)
        X = {k: stacked_heads(factor_stack(f, k)) for k in ("O", "Q", "K", "V")}
        timed = {"O": ("O", "Q"), "K": ("K", "V")}
        row = {"shape": shape, "nulls": {}}
        for null in ("rotation", "reassign"):
            if args.quick and null == "rotation" and name == "qwen3-235b":
                row["nulls"][null] = {"skipped": "--quick"}
                continue
            reps = 1 if (null == "rotation" and name == "qwen3-235b") else 2
            per_kind = {}
            for k, covers in timed.items():
                parts = {"null_factors": [], "orthonormal_bases": [], "pk_within": []}
                for s in range(reps):
                    t0 = time.perf_counter()
                    Xn = null_factors(X[k], null, rng_for("bench", null, k, s))
                    t1 = time.perf_counter()
                    B, r = orthonormal_bases(Xn)
                    t2 = time.perf_counter()
                    pk_within(B, r)
                    t3 = time.perf_counter()
                    for p, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
                        parts[p].append(dt)
                tot = [a + b + c for a, b, c in zip(*parts.values())]
                best = int(np.argmin(tot))
                per_kind[k] = {"covers": list(covers), "heads": int(X[k].shape[0]), "best_s": tot[best],
                               "parts_s": {p: v[best] for p, v in parts.items()}, "n": reps}
                log(f"nulls {name} {null} {k}: {tot[best]:.2f}s ({', '.join(f'{p} {v[best]:.2f}' for p, v in parts.items())})")
            layer_s = sum(v["best_s"] * len(v["covers"]) for v in per_kind.values())
            row["nulls"][null] = {"per_kind": per_kind, "seconds_per_layer_sample": layer_s,
                                  "samples_per_second_per_layer": 1.0 / layer_s}
        out["shapes"][name] = row
    return out


def bench_null_cross(args) -> dict:
    """The cross-layer null pairs' routes at the Qwen2.5-7B and Qwen3-235B shapes (bench/null_cross_routes.py)."""
    import null_cross_routes as ncr

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    out = {"what": f"cross-layer null pairs: stacked-basis blocks (cross_pairs, rho only) and projector Grams "
                   f"(slab packing and slab products timed apart), {args.null_cross_heads} x {args.null_cross_heads} "
                   f"heads of random orthonormal bases, as fractions of the same dtype's GEMM rate; a layer pair "
                   f"(all heads, readers Q, K, V, one sample and null) at those rates and the job's budgets",
           "shapes": {}}
    for name, shape in (("qwen2.5-7b", hb.QWEN25_7B), ("qwen3-235b", hb.QWEN3_235B)):
        r = out["shapes"][name] = ncr.measure(shape, args.null_cross_heads, max(1, args.repeat - 1), clock)
        for dt in ("float64", "float32"):
            v = r[dt]
            log(f"null_cross {name} {dt}: blocks {v['blocks_share']:.0%}, pack {v['pack_share']:.0%}, gram "
                f"{v['gram_share']:.0%} of GEMM; layer pair blocks {v['layer_pair_s']['blocks']:.2f} s, projectors "
                f"{v['layer_pair_s']['projectors']:.2f} s")
    return out


def _geqrf_flops(m: int, n: int) -> int:
    """Householder QR of m x n (m >= n), the reflectors and R only (LAPACK dgeqrf's count): 2 m n^2 - 2/3 n^3.
    Forming Q (dorgqr, as much again) is not counted: the rotation null applies the reflectors."""
    return 2 * m * n * n - 2 * n**3 // 3


def _gram_flops(D: int, d: int) -> int:
    """A symmetric Gram X^T X of a D x d factor: its upper triangle, D d (d + 1) (a syrk)."""
    return D * d * (d + 1)


def null_sample_flops(null: str, n: int, D: int, d: int, pairs: str = "within") -> dict:
    """FLOPs one null draw of one kind with n heads cannot avoid, + its bases (+ within-layer pairs):
    rotation = the Householder QR of the m x m Gaussian (m = n d; dgeqrf's count) and applying its
    Q to the D x m layer matrix (2 D m^2, a GEMM's count); when m > D the LQ of S (dgeqrf of
    m x D), the QR of the m x D Gaussian and L Q^T (2 D^2 m); bases = CholeskyQR2 per head: two
    symmetric Grams (D d (d + 1) each) and two D x d by d x d products (2 D d^2 each); within pairs =
    one d x d block per pair (2 D d^2) and the sigma_max Gram + tridiagonal reduction (2 d^3 + 4/3 d^3)."""
    m = n * d
    out = {}
    if null == "rotation":
        if m <= D:
            out["haar_qr"], out["rotate"] = _geqrf_flops(m, m), 2 * D * m * m
        else:
            out["lq"], out["haar_qr"], out["rotate"] = _geqrf_flops(m, D), _geqrf_flops(m, D), 2 * D * D * m
    out["bases"] = n * (2 * _gram_flops(D, d) + 4 * D * d * d)
    if pairs == "within":
        npairs = n * (n - 1) // 2
        out["pair_blocks"] = 2 * D * d * d * npairs
        out["sigma_max"] = npairs * (2 * d**3 + 4 * d**3 // 3)
    out["total"] = sum(out.values())
    return out


def bench_stages(args) -> dict:
    """Each heavy stage's FLOP rate over numpy matmul's, timed interleaved in this process."""
    from headgeom.methods.nulls import null_factors
    from headgeom.methods.overlap import cross_pairs, factor_stack, orthonormal_bases, pk_within, stacked, stacked_heads
    from headgeom.core.seeds import rng_for

    s7, s235 = hb.QWEN25_7B, hb.QWEN3_235B
    D, d, H, G, L = (s7[k] for k in ("d_model", "d_head", "n_heads", "n_kv", "n_layers"))
    X = np.random.default_rng(5).standard_normal((H * d, D))
    Y = np.ascontiguousarray(X.T)
    f235 = hb.synthetic_layer(**s235, seed=1)
    f7 = hb.synthetic_layer(**s7, seed=200)
    f7r = hb.synthetic_layer(**s7, seed=201)
    Xk = {k: stacked_heads(factor_stack(f7, k)) for k in ("O", "Q", "K", "V")}  # as pk_null_within_job: once per kind
    Xw_plain = factor_stack(f7, "O")  # pk_null_cross_job draws each layer once per sample: stacked per draw
    Xr = {k: factor_stack(f7r, k) for k in ("Q", "K", "V")}
    prec = args.precision

    def null_within(null):
        for k in ("O", "Q", "K", "V"):
            B, r = orthonormal_bases(null_factors(Xk[k], null, rng_for("bench", null, k, 0), prec))
            pk_within(B, r)

    def null_cross_pieces():  # one writer draw, one reader draw per kind, one layer pair's blocks
        Bw, rw = orthonormal_bases(null_factors(Xw_plain, "rotation", rng_for("bench", "w"), prec))
        Sw = stacked(Bw)
        for k in ("Q", "K", "V"):
            Br, rr = orthonormal_bases(null_factors(Xr[k], "rotation", rng_for("bench", "r", k), prec))
            cross_pairs(Bw, rw, Br, rr, angles=False, Sw=Sw)

    cache = {}

    def cross_blocks_only():
        if "w" not in cache:
            cache["w"] = orthonormal_bases(null_factors(Xw_plain, "rotation", rng_for("bench", "w"), prec))
            cache["r"] = {k: orthonormal_bases(null_factors(Xr[k], "rotation", rng_for("bench", "r", k), prec)) for k in ("Q", "K", "V")}
        Bw, rw = cache["w"]
        Sw = stacked(Bw)  # as pk_null_cross_job: once per writer and reader layer
        for k, (Br, rr) in cache["r"].items():
            cross_pairs(Bw, rw, Br, rr, angles=False, Sw=Sw)

    fns = {"matmul": lambda: X @ Y, "closure_core": lambda: hb.gram_core(f235),
           "null_within_rotation": lambda: null_within("rotation"), "null_within_reassign": lambda: null_within("reassign"),
           "null_cross_pieces": null_cross_pieces, "null_cross_pair_blocks": cross_blocks_only}
    log(f"stages: {len(fns)} timings x {args.repeat} rounds, interleaved, {args.clock} time (null precision {prec})")
    times = hb.interleaved(fns, args.repeat, clock=args.clock)
    best = {k: min(v) for k, v in times.items()}
    rate = 2 * D * (H * d) ** 2 / best["matmul"]
    gr = hb.gram_core(f235)[-1]
    nk = {"O": H, "Q": H, "K": G, "V": G}
    fl = {"closure_core": gr.flops(("A", "B", "M_pair"))}
    for null in ("rotation", "reassign"):
        parts: dict = {}
        for k, n in nk.items():
            for a, b in null_sample_flops(null, n, D, d).items():
                parts[a] = parts.get(a, 0) + b
        fl[f"null_within_{null}"] = parts
    # cross-layer null job per sample and null over the whole model: L writer draws, 3 L reader
    # draws and L (L - 1) / 2 layer pairs of blocks (each 2 D (H d)(n d) for kinds Q, K, V)
    pair_gemm = sum(2 * D * (H * d) * (n * d) for n in (H, G, G))
    draw_w = null_sample_flops("rotation", H, D, d, pairs="none")["total"]
    draw_r = sum(null_sample_flops("rotation", n, D, d, pairs="none")["total"] for n in (H, G, G))
    npairs = L * (L - 1) // 2
    t_draws = best["null_cross_pieces"] - best["null_cross_pair_blocks"]
    fl["null_cross_job"] = {"draws": L * (draw_w + draw_r), "pair_gemms": npairs * pair_gemm}
    t_cross_job = L * t_draws + npairs * best["null_cross_pair_blocks"]
    rows = {}
    for k in ("closure_core", "null_within_rotation", "null_within_reassign", "null_cross_job"):
        tot = sum(v for a, v in fl[k].items() if a != "total")
        t = t_cross_job if k == "null_cross_job" else best[k]
        rows[k] = {"flops": {**fl[k], "total": tot}, "seconds": t, "gflops": tot / t / 1e9, "share_of_matmul": tot / t / rate}
        # spread: each round's stage time against the same round's matmul
        mm_r = np.array(times["matmul"])
        t_r = (L * (np.array(times["null_cross_pieces"]) - np.array(times["null_cross_pair_blocks"]))
               + npairs * np.array(times["null_cross_pair_blocks"])) if k == "null_cross_job" else np.array(times[k])
        rows[k]["share_rounds"] = [float(x) for x in tot / t_r / (2 * D * (H * d) ** 2 / mm_r)]
    res = {"matmul_gflops": rate / 1e9, "matmul_shape": [H * d, D, H * d], "precision": prec, "clock": args.clock,
           "loadavg_1m_end": os.getloadavg()[0], "stages": rows,
           "timings": {k: hb.summary(v) for k, v in times.items()},
           "notes": {"closure_core": "Qwen3-235B layer: LayerGrams A (per head) and B (per KV group), symmetric "
                                     "(D d (d + 1) each), M own + wrong group (2 D d^2 each), then P, alpha, g_T, "
                                     "P_wrong (their d^3 terms not counted)",
                     "null_within_rotation": "Qwen2.5-7B layer, one sample, kinds O, Q, K, V: Householder QR of the "
                                             "m x m Gaussian (dgeqrf count 4/3 m^3, Q not formed) + applying it "
                                             "(2 D m^2), CholeskyQR2 bases (2 syrk + 2 GEMM per head), within-layer "
                                             "pair blocks (2 D d^2 per pair) + sigma_max (2 d^3 + 4/3 d^3 per pair)",
                     "null_within_reassign": "as rotation without the Haar QR and its application",
                     "null_cross_job": f"Qwen2.5-7B, {L} layers, one sample of the rotation null: {L} writer and {3 * L} "
                                       f"reader draws (QR + its application + bases) and {npairs} layer pairs of basis GEMMs for Q, K, V; "
                                       "time = L x (one writer + three reader draws) + pairs x (one pair's blocks), timed separately"}}
    for k, v in rows.items():
        log(f"stages {k}: {v['flops']['total'] / 1e9:.1f} GFLOP in {v['seconds']:.2f}s = {v['gflops']:.1f} GFLOP/s, "
            f"{100 * v['share_of_matmul']:.0f}% of matmul ({rate / 1e9:.1f})")
    return res
