"""make bench: headgeom against its baselines and the machine, as ratios measured in one run.

    .venv/bin/python bench/run.py                 # closure, pk, nulls, fetch (a few minutes)
    .venv/bin/python bench/run.py --e2e           # + cold end-to-end pipeline run
    .venv/bin/python bench/run.py --only closure,pk --threads 2

Writes results/bench/{env,stages,closure,pk,nulls,null_cross,fetch,capacity,overhead[,e2e]}.json and results/bench/summary.md and
prints the table of ratios with their targets. Each ratio is of two timings from this process,
interleaved round-robin so both sides see the same background load, each side's best of its
repeats (the machine is shared: a best-of is the least disturbed run). Math is float64. The
stage and PK shares of the matmul rate are timed by this process's CPU time when it runs one
BLAS thread (--clock; wall time otherwise): other jobs' load moves it far less than wall time.

BLAS threads: --threads N (default 1, what a pipeline job gets: Snakemake sets
OPENBLAS_NUM_THREADS to the rule's threads: 1) is exported as OMP/OPENBLAS/MKL_NUM_THREADS
before numpy is imported, unless they are already set in the environment."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("stages", "closure", "pk", "nulls", "null_cross", "fetch", "capacity", "overhead")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    p.add_argument("--e2e", action="store_true", help="also time a cold end-to-end pipeline run (make run)")
    p.add_argument("--cores", type=int, default=2, help="snakemake -c for --e2e (default 2, as make run)")
    p.add_argument("--paper", action="store_true",
                   help="with --e2e: then run --configfile config/paper.yaml on that run's outputs (the papers' design)")
    p.add_argument("--threads", default=None, help="BLAS threads (default 1 unless OPENBLAS_NUM_THREADS is set)")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds per comparison (default 3)")
    p.add_argument("--naive-samples", type=int, default=3, help="closure: (head, V) evaluations timed for the naive baseline")
    p.add_argument("--fm-heads", type=int, default=8, help="closure: heads timed for the FactoredMatrix baseline (own + wrong V)")
    p.add_argument("--pk-layer-pairs", type=int, default=1, help="PK: writer->reader layer pairs timed per round (of 378)")
    p.add_argument("--scipy-pairs", type=int, default=24, help="PK: head pairs timed with scipy.linalg.subspace_angles")
    p.add_argument("--null-cross-heads", type=int, default=32,
                   help="null_cross: writer and reader heads timed per route (random orthonormal bases)")
    p.add_argument("--quick", action="store_true", help="nulls: skip the rotation null at the Qwen3-235B shape (~1 min/sample)")
    p.add_argument("--precision", default="float64", choices=("float64", "float32"), help="stages: null precision")
    p.add_argument("--clock", default=None, choices=("cpu", "wall"),
                   help="stages and PK GEMM shares: time by this process's CPU time (default with 1 BLAS thread: "
                        "on a shared machine it is what the work got of a core) or by wall time (default otherwise)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench"))
    return p.parse_args(argv)


sys.path.insert(0, str(ROOT))  # the tools package (tools/baselines.py, synth.py, hubserver.py)

# numpy and the baselines are imported by main(), after the BLAS thread count is exported: OpenBLAS
# reads it once, when numpy loads it
np = hb = None


def _set_threads(args) -> None:
    """Export --threads as the BLAS thread count (unless one is set already and --threads is not
    given), then import numpy; --clock defaults to CPU time under one BLAS thread."""
    global np, hb
    if args.threads is not None or "OPENBLAS_NUM_THREADS" not in os.environ:
        n = str(args.threads or 1)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = n
    if args.clock is None:
        args.clock = "cpu" if os.environ.get("OPENBLAS_NUM_THREADS") == "1" else "wall"
    import numpy as np

    from tools import baselines as hb


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def relerr(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


# ---------------------------------------------------------------- closure


def bench_closure(args) -> dict:
    from headgeom.methods.closure import closure_layer, wrong_v_groups

    shape = hb.QWEN3_235B
    H, G, D, d = shape["n_heads"], shape["n_kv"], shape["d_model"], shape["d_head"]
    log(f"closure: Qwen3-235B layer shape D={D} d={d} H={H} G={G} (synthetic, float64)")
    f = hb.synthetic_layer(**shape, seed=1)
    O, kv = f.W_O, f.kv_group
    Vg = np.ascontiguousarray(np.swapaxes(f.W_V, -1, -2))
    wv = wrong_v_groups(kv, G)
    evals = 2 * H  # (head, own V) and (head, wrong V)

    # the baselines are timed on samples of (head, V) evaluations and extrapolated to 2H
    rng = np.random.default_rng(0)
    fm_heads = np.sort(rng.choice(H, size=min(args.fm_heads, H), replace=False))
    fm_O = np.concatenate([O[fm_heads], O[fm_heads]])
    fm_V = np.concatenate([Vg[kv[fm_heads]], Vg[wv[fm_heads]]])
    naive_cases = [(int(h), bool(w)) for h, w in zip(rng.choice(H, size=args.naive_samples, replace=False),
                                                       np.arange(args.naive_samples) % 2)]
    out: dict = {}
    naive_iter = iter(naive_cases * args.repeat)

    def naive_one():
        h, wrong = next(naive_iter)
        r = hb.naive_closure(O[h], Vg[(wv if wrong else kv)[h]])
        out.setdefault("naive", {})[(h, wrong)] = r

    Xmm = np.random.default_rng(5).standard_normal((H * d // 2, D))  # GEMM reference: (Hd/2 x D) @ (D x Hd/2)
    Ymm = np.ascontiguousarray(Xmm.T)
    fns = {
        "matmul": lambda: Xmm @ Ymm,
        "gram_core": lambda: out.__setitem__("core", hb.gram_core(f)),
        "closure_layer": lambda: out.__setitem__("layer", closure_layer(f)),
        "factored": lambda: out.__setitem__("fm", hb.factored_closure(fm_O, fm_V)),
    }
    hb.gram_core(f)  # warm-up: first-touch page faults of the big Gram inputs
    closure_layer(f)
    times = {k: [] for k in (*fns, "naive")}
    rounds = max(args.repeat, len(naive_cases))
    for r in range(rounds):
        for k, fn in fns.items():
            if r < args.repeat:
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        if r < len(naive_cases):
            t0 = time.perf_counter()
            naive_one()
            times["naive"].append(time.perf_counter() - t0)
        log(f"closure round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v))

    P, alpha, g, Pw, gr = out["core"]
    lay = out["layer"]
    fP, fa, fg = out["fm"]
    n = len(fm_heads)
    agree = {
        "closure_layer_vs_core": max(relerr(lay["P"], P), relerr(lay["alpha"], alpha), relerr(lay["g_T"], g),
                                     relerr(lay["P_wrong_v"], Pw)),
        "factored_vs_core": max(relerr(fP[:n], P[fm_heads]), relerr(fa[:n], alpha[fm_heads]),
                                relerr(fg[:n], g[fm_heads]), relerr(fP[n:], Pw[fm_heads])),
        "naive_vs_core": max(
            max(relerr(rv[0], (Pw if w else P)[h]) for (h, w), rv in out["naive"].items()),
            max(relerr(rv[1], alpha[h]) for (h, w), rv in out["naive"].items() if not w),
            max(relerr(rv[2], g[h]) for (h, w), rv in out["naive"].items() if not w),
        ),
    }
    s = {k: hb.summary(v) for k, v in times.items()}
    naive_stage = s["naive"]["best_s"] * evals
    fm_stage = s["factored"]["best_s"] * evals / (2 * n)
    core, layer = s["gram_core"]["best_s"], s["closure_layer"]["best_s"]
    core_flops = gr.flops(("A", "B", "M_pair"))
    rate_mm = 2 * D * (H * d // 2) ** 2 / s["matmul"]["best_s"]
    res = {
        "unavoidable_flops": {**core_flops, "total": sum(core_flops.values()),
                              "what": "A = O_h^T O_h per head, B = V_g^T V_g per KV group, M = V_g^T O_h for the own and "
                                      "the wrong group, 2 D d^2 each (d^3 terms of the trace products not counted)"},
        "gflops": {"numpy_matmul": rate_mm / 1e9, "gram_core": sum(core_flops.values()) / core / 1e9},
        "share_of_matmul": {"gram_core": sum(core_flops.values()) / core / rate_mm,
                            "closure_layer": sum(core_flops.values()) / layer / rate_mm},
        "shape": shape,
        "what": "per head: P, alpha*, g_T with the own V and P with the cyclic wrong-V (2H = %d evaluations)" % evals,
        "timings": s,
        "naive_sample": [{"head": h, "wrong_v": w} for h, w in naive_cases],
        "factored_heads": fm_heads.tolist(),
        "stage_s": {"gram_core": core, "closure_layer": layer, "naive_extrapolated": naive_stage,
                    "factored_extrapolated": fm_stage},
        "ratios": {
            "naive_over_gram_core": naive_stage / core,
            "factored_over_gram_core": fm_stage / core,
            "naive_over_closure_layer": naive_stage / layer,
            "factored_over_closure_layer": fm_stage / layer,
        },
        "nominal_flops_per_eval": hb.closure_flops(D, d, H),
        "max_rel_err": agree,
        "agree": all(v < 1e-8 for v in agree.values()),
    }
    log(f"closure: naive/core {res['ratios']['naive_over_gram_core']:.0f}x, factored/core "
        f"{res['ratios']['factored_over_gram_core']:.1f}x, agreement {agree}")
    return res


# ---------------------------------------------------------------- PK cross-layer


def bench_pk(args) -> dict:
    import scipy.linalg

    from headgeom.methods.overlap import cross_blocks, cross_pairs, layer_spaces, stacked

    shape = hb.QWEN25_7B
    D, d, H, G, L = (shape[k] for k in ("d_model", "d_head", "n_heads", "n_kv", "n_layers"))
    kinds = ("Q", "K", "V")
    npairs_model = L * (L - 1) // 2
    log(f"pk: Qwen2.5-7B shape D={D} d={d} H={H} G={G}; {args.pk_layer_pairs} of {npairs_model} layer pairs per round")
    writer = hb.synthetic_layer(**shape, seed=100)
    readers = [hb.synthetic_layer(**shape, seed=101 + i) for i in range(args.pk_layer_pairs)]
    Xw, Bw, rw = layer_spaces(writer, ("O",))["O"]
    spaces = [layer_spaces(r, kinds) for r in readers]
    heads = {k: spaces[0][k][0].shape[0] for k in kinds}
    pairs_per_lp = sum(H * heads[k] for k in kinds)
    flops = {k: hb.cross_pairs_flops(D, H, heads[k], d) for k in kinds}
    flops_lp = sum(f["total"] for f in flops.values())
    A = np.random.default_rng(5).standard_normal((D, H * d))
    B = np.random.default_rng(6).standard_normal((D, H * d))
    At = np.ascontiguousarray(A.T)

    # scipy on a sample of (writer head, reader head, kind) pairs of the first layer pair
    rng = np.random.default_rng(7)
    per_kind = {"Q": args.scipy_pairs // 2, "K": args.scipy_pairs // 4, "V": args.scipy_pairs - args.scipy_pairs // 2 - args.scipy_pairs // 4}
    sample = [(k, int(rng.integers(H)), int(rng.integers(heads[k]))) for k in kinds for _ in range(per_kind[k])]
    res_hg: dict = {}

    def run_cross(weighted: bool):  # the writer stacked once per call, as pk_cross_job does once per writer
        Sw, SXw = stacked(Bw), (stacked(Xw) if weighted else None)
        for sp in spaces:
            for k in kinds:
                Xr, Br, rr = sp[k]
                r = cross_pairs(Bw, rw, Br, rr, Xw=Xw, Xr=Xr, Sw=Sw, SXw=SXw) if weighted else cross_pairs(Bw, rw, Br, rr, Sw=Sw)
                res_hg[k] = r

    scipy_theta = {}

    def run_scipy():
        for (k, i, j) in sample:
            scipy_theta[(k, i, j)] = scipy.linalg.subspace_angles(Xw[i], spaces[0][k][0][j])

    fns = {
        "matmul": lambda: At @ B,
        "cross_pairs_job": lambda: run_cross(True),  # as pk_cross_job calls it (+ spectral-weighted measure)
        "cross_pairs_rho_angle": lambda: run_cross(False),  # the outputs scipy gives: rho, min angle
        "cross_blocks_Q": lambda: [cross_blocks(Bw, sp["Q"][1]) for sp in spaces],
        "bases_writer": lambda: layer_spaces(writer, ("O",)),
        "bases_readers": lambda: [layer_spaces(r, kinds) for r in readers],
        "scipy_sample": run_scipy,
    }
    times = hb.interleaved(fns, args.repeat, clock=args.clock)
    for k, v in times.items():
        log(f"pk {k}: best {min(v):.3f}s of {len(v)} ({args.clock} time)")
    s = {k: hb.summary(v) for k, v in times.items()}
    nlp = len(readers)
    flops_plain = sum(hb.cross_pairs_flops(D, H, heads[k], d, weighted=False)["total"] for k in kinds)
    rate_mm = 2 * D * (H * d) ** 2 / s["matmul"]["best_s"]
    rate_cross = nlp * flops_lp / s["cross_pairs_job"]["best_s"]
    rate_plain = nlp * flops_plain / s["cross_pairs_rho_angle"]["best_s"]
    rate_gemm = nlp * flops["Q"]["gemm"] / s["cross_blocks_Q"]["best_s"]
    # per writer->reader layer pair, as pk_cross_job works: the reader layer's bases once per
    # layer pair, the writer's once per job (L - 1 jobs over all L (L - 1) / 2 layer pairs)
    writer_share = (L - 1) / npairs_model
    lp_bases = s["bases_readers"]["best_s"] / nlp + writer_share * s["bases_writer"]["best_s"]
    lp_plain = lp_bases + s["cross_pairs_rho_angle"]["best_s"] / nlp
    lp_job = lp_bases + s["cross_pairs_job"]["best_s"] / nlp
    hg_pair = lp_plain / pairs_per_lp
    sp_pair = s["scipy_sample"]["best_s"] / len(sample)

    # agreement with scipy: rho and the minimum principal angle
    errs_rho, errs_ang = [], []
    for (k, i, j), theta in scipy_theta.items():
        r = res_hg[k] if nlp == 1 else cross_pairs(Bw, rw, spaces[0][k][1], spaces[0][k][2])
        p = i * heads[k] + j
        dim = min(rw[i], spaces[0][k][2][j])
        errs_rho.append(abs(hb.rho_from_angles(theta, dim) - r["rho"][p]) / r["rho"][p])
        errs_ang.append(abs(np.degrees(theta.min()) - r["min_angle_deg"][p]))
    res = {
        "shape": shape,
        "layer_pairs_timed": nlp,
        "layer_pairs_model": npairs_model,
        "pairs_per_layer_pair": pairs_per_lp,
        "what": "pk.cross_pairs (writer O of layer l vs readers Q, K, V of layer l') with min angles, with and "
                "without the spectral-weighted measure (pk_cross_job computes it); bases by pk.layer_spaces",
        "timings": s,
        "clock": args.clock,
        "flops_per_layer_pair": {k: v for k, v in flops.items()},
        "flops_per_layer_pair_total": flops_lp,
        "gflops": {"numpy_matmul": rate_mm / 1e9, "cross_pairs": rate_cross / 1e9, "cross_pairs_rho_angle": rate_plain / 1e9,
                   "cross_blocks_gemm": rate_gemm / 1e9},
        "matmul_shape": [H * d, D, H * d],
        "share_of_matmul": {"cross_pairs": rate_cross / rate_mm, "cross_pairs_rho_angle": rate_plain / rate_mm,
                            "cross_blocks_gemm": rate_gemm / rate_mm},
        "flops_per_layer_pair_rho_angle": flops_plain,
        "per_layer_pair_s": {"bases": lp_bases, "rho_angle": lp_plain, "job": lp_job},
        "per_pair_s": {"headgeom_rho_angle": hg_pair, "headgeom_job": lp_job / pairs_per_lp, "scipy_subspace_angles": sp_pair},
        "scipy_sample_pairs": len(sample),
        "speedup_over_scipy": sp_pair / hg_pair,
        "speedup_over_scipy_job": sp_pair / (lp_job / pairs_per_lp),
        "stage_extrapolated_full_model_s": lp_job * npairs_model,
        "max_rel_err_rho_vs_scipy": float(max(errs_rho)),
        "max_abs_err_min_angle_deg_vs_scipy": float(max(errs_ang)),
        "agree": bool(max(errs_rho) < 1e-8 and max(errs_ang) < 1e-6),
    }
    log(f"pk: cross_pairs {rate_cross / 1e9:.1f} GFLOP/s = {100 * rate_cross / rate_mm:.0f}% of matmul "
        f"({rate_mm / 1e9:.1f}); {res['speedup_over_scipy']:.1f}x scipy per pair")
    return res


# ---------------------------------------------------------------- nulls


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


# ---------------------------------------------------------------- stages as a share of GEMM


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


# ---------------------------------------------------------------- fetch


def bench_fetch(args) -> dict:
    """Bytes the loopback hub (tools/hubserver.py) sends for a fetch, over the bytes needed."""
    tmp = Path(tempfile.mkdtemp(prefix="headgeom-bench-fetch-"))
    home = tmp / "hf_home"
    os.environ.update(HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
    for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(var, None)
    from huggingface_hub import close_session, constants

    from headgeom.adapters import adapter_for
    from headgeom.io.fetch import fetch_model
    from tools.hubserver import FakeHub
    from tools.synth import write_llama

    constants.HF_HUB_OFFLINE = False
    constants.HF_HOME, constants.HF_HUB_CACHE = str(home), str(home / "hub")
    constants.HF_TOKEN_PATH, constants.HF_STORED_TOKENS_PATH = str(home / "token"), str(home / "stored_tokens")
    close_session()
    ckpt = tmp / "ckpt"
    shape = dict(d_model=256, n_heads=8, n_kv=2, d_head=32, n_layers=6)
    info = write_llama(ckpt, **shape, shards=3, extra_mlp=True, closed=())
    tensors, config = info["tensors"], info["config"]
    adapter = adapter_for(config, "safetensors")
    prefix = adapter.fields(config, list(tensors)).prefix
    need = [k for k in tensors if adapter.wanted(k, prefix)]
    need_bytes = sum(tensors[k].nbytes for k in need)
    ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    repo, sha = "bench-org/tiny-llama", "be" * 20
    fake = FakeHub(repo, {sha: ckpt})
    constants.ENDPOINT = fake.endpoint
    constants.HUGGINGFACE_CO_URL_TEMPLATE = fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    try:
        fake.reset()
        t0 = time.perf_counter()
        m = fetch_model("bench", {"source": "hf", "repo_id": repo, "revision": "main"}, tmp / "store", log=lambda s: None)
        wall = time.perf_counter() - t0
        sent = fake.repo_bytes_sent
        by_kind = dict(fake.sent_by_kind)
        n_req = len([r for r in fake.requests if r["server"] in ("hub", "cdn") and r["path"] != "/api/agent-harnesses"])
    finally:
        fake.close()
        shutil.rmtree(tmp, ignore_errors=True)
    res = {
        "checkpoint": {**shape, "shards": 3, "mlp": True, "dtype": "float32"},
        "bytes_needed": need_bytes,
        "bytes_transferred": sent,
        "bytes_by_kind": by_kind,
        "checkpoint_bytes": ckpt_bytes,
        "requests": n_req,
        "ratio_transferred_over_needed": sent / need_bytes,
        "share_of_checkpoint": sent / ckpt_bytes,
        "client_bytes_fetched": m["source"]["bytes_fetched"],
        "wall_s": wall,
    }
    log(f"fetch: {sent} bytes sent for {need_bytes} needed ({sent / need_bytes:.4f}x), "
        f"{100 * sent / ckpt_bytes:.1f}% of the checkpoint")
    return res


# ---------------------------------------------------------------- capacity search


def bench_capacity(args) -> dict:
    """Paper 1's capacity search (projected ascent with SVD retraction) at paper settings' batch
    (6 selected heads x 8 restarts per layer): per start and step, the batched ascent against the
    per-head loop it replaced (tools/capacity_ref.py) and against its own unavoidable work
    (one d x d SVD and the products, timed alone on the same stacked batch)."""
    from tools.capacity_ref import ref_projected_ascent

    from headgeom.methods.paper1.capacity import projected_ascent

    heads, restarts, iters = 6, 8, 20
    mm = np.random.default_rng(0).standard_normal((2, 1024, 1024))
    res = {"heads": heads, "restarts": restarts, "iters": iters, "shapes": {}}
    t_mm = hb.summary(hb.interleaved({"mm": lambda: mm[0] @ mm[1]}, args.repeat)["mm"])["best_s"]
    res["gflops_numpy_matmul_1024"] = 2 * 1024**3 / t_mm / 1e9
    for d in (32, 64, 128):
        r = np.random.default_rng(d)
        n = heads * restarts
        X0 = r.standard_normal((n, d, d))
        sig = np.linalg.svd(X0, compute_uv=False)
        D = np.sort(r.uniform(0.05, 1, (n, d)), axis=-1)[:, ::-1].copy()
        out = {}

        def batched():
            out["new"] = projected_ascent(X0, D, sig, iters)

        def loop():
            out["ref"] = [ref_projected_ascent(X0[i:i + restarts], D[i:i + restarts], sig[i:i + restarts], iters)
                          for i in range(0, n, restarts)]

        Y = X0 + 0.01 * r.standard_normal(X0.shape)

        def floor_svd():
            U, _, Wt = np.linalg.svd(Y)
            out["floor"] = (U * sig[:, None, :]) @ Wt

        def floor_products():
            X = out["floor"]
            Z = (X * D[:, None, :]) @ X
            XT = np.swapaxes(X, -1, -2)
            out["prods"] = (X @ XT, XT @ X, Z @ XT, XT @ Z)

        t = hb.interleaved({"batched": batched, "loop": loop, "svd": floor_svd, "products": floor_products}, args.repeat)
        s = {k: hb.summary(v)["best_s"] for k, v in t.items()}
        new_X, new_P = out["new"]
        ref_P = np.concatenate([p for _, p in out["ref"]])
        steps = n * iters
        # the floor charges the gradient's products to every step (only accepted steps need them):
        # an upper bound of the unavoidable work
        per = {"batched": s["batched"] / steps, "loop": s["loop"] / steps,
               "floor": (s["svd"] + s["products"]) / n}
        flop = {"svd": 21 * d**3, "retraction_product": 2 * d**3, "XDX": 2 * d**3, "gradient": 6 * d**3}
        out_d = {
            "per_start_step_s": per,
            "unavoidable_flop_per_start_step": flop,
            "speedup_over_loop": per["loop"] / per["batched"],
            "floor_share": per["floor"] / per["batched"],
            "gflops_step": sum(flop.values()) / per["batched"] / 1e9,
            "max_rel_diff_P_vs_loop": relerr(new_P, ref_P),
        }
        out_d["share_of_matmul"] = out_d["gflops_step"] / res["gflops_numpy_matmul_1024"]
        res["shapes"][f"d{d}"] = out_d
        log(f"capacity d={d}: {1e6 * per['batched']:.0f} us/start-step batched, {1e6 * per['loop']:.0f} loop, "
            f"floor {1e6 * per['floor']:.0f} ({100 * out_d['floor_share']:.0f}%), max rel diff {out_d['max_rel_diff_P_vs_loop']:.1e}")
    res["rule"] = capacity_rule(args)
    res["what"] = (f"capacity search, {heads} heads x {restarts} restarts stacked, {iters} steps, float64; unavoidable work "
                   "per start and step: one d x d SVD with both singular-vector sets (counted 21 d^3, Golub-Reinsch), "
                   "the retraction product 2 d^3, XDX 2 d^3, the gradient's products 6 d^3 (X X^T, X^T X symmetric "
                   "at d^3 each, Z X^T and X^T Z at 2 d^3) = 31 d^3; its floor is that SVD and those products timed "
                   "alone on the same stacked batch")
    return res


# ---------------------------------------------------------------- per-job overhead


def bench_overhead(args) -> dict:
    """What a `make run` job pays before its work (bench/job_overhead.py: Snakemake's scheduling,
    the script preamble, the interpreter, the job's imports), per job, on throw-away workflows."""
    out = Path(args.out) / "job_overhead.json"
    log("overhead: bench/job_overhead.py --jobs 20")
    subprocess.run([sys.executable, str(ROOT / "bench" / "job_overhead.py"), "--jobs", "20", "--out", str(out)],
                   check=True, capture_output=True)
    return json.loads(out.read_text())


# ---------------------------------------------------------------- end to end


def bench_e2e(args) -> dict:
    """Cold `make run`: the pipeline in a fresh working directory (the default config, every
    target), as a clean clone's `make run` after the environment is installed; with --paper, then
    `--configfile config/paper.yaml` on its outputs (the papers' design, choice_sensitivity included)."""
    work = Path(tempfile.mkdtemp(prefix="headgeom-bench-e2e-"))
    cmd = [str(Path(sys.executable).parent / "snakemake"), f"-c{args.cores}", "-s", str(ROOT / "Snakefile"), "-d", str(work)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    log(f"e2e: {' '.join(cmd)}")
    res = _timed_run(cmd, env, work)
    res["cores"] = args.cores
    log(f"e2e: rc {res['returncode']}, {res['wall_s']:.1f}s, {res['jobs']} jobs")
    failed = res["returncode"] != 0
    if not failed and getattr(args, "paper", False):
        pcmd = cmd + ["--configfile", str(ROOT / "config" / "paper.yaml")]
        log(f"e2e paper: {' '.join(pcmd)}")
        res["paper"] = _timed_run(pcmd, env, work)
        failed = res["paper"]["returncode"] != 0
        log(f"e2e paper: rc {res['paper']['returncode']}, {res['paper']['wall_s']:.1f}s, {res['paper']['jobs']} jobs")
    if not failed:  # a failed run's work directory is kept for a look
        shutil.rmtree(work, ignore_errors=True)
        res["workdir"] = None
    return res


def _timed_run(cmd, env, work) -> dict:
    """One Snakemake run in ``work``: wall time, job count, and where its seconds went per rule
    from its own logs (headgeom timings)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    text = r.stdout + r.stderr
    steps = re.findall(r"(\d+) of (\d+) steps \(100%\) done", text)
    res = {"command": " ".join(cmd), "returncode": r.returncode, "wall_s": wall,
           "jobs": int(steps[-1][1]) if steps else None, "workdir": str(work)}
    try:
        from headgeom.commands.timings import render, timings

        rows, runlog = timings(work)
        res["rules"] = rows
        res["rules_markdown"] = render(rows, runlog)
    except Exception as e:  # noqa: BLE001 - a failed run may have no log to read
        res["rules_error"] = str(e)
    if r.returncode != 0:
        res["tail"] = text[-3000:]
    return res


# ---------------------------------------------------------------- summary


CAPACITY_RULE_LAYER = ("smollm2-135m", 10)  # 6 selected heads (d_head 64): the representative layer
CAPACITY_FALL_TOL = 1e-4  # the stated tolerance of the L-BFGS cap (docs/performance.md)
CAPACITY_BEFORE_ITERS = 300  # the papers' step count, run by the gradient ascent before the L-BFGS cap


def capacity_rule(args, tensors=None) -> dict | None:
    """The capacity search at the papers' settings on one representative embedded layer, before
    (the gradient ascent, 8 restarts x 300 fixed steps: the search paper.yaml ran before its L-BFGS
    cap) and after (paper.yaml's capacity settings as they are): SVD count, CPU time and Cap_hat of
    each, in one run. None without the layer's tensor store."""
    from headgeom.io.store import TensorStore
    from headgeom.core.config import load_config
    from headgeom.methods.paper1 import capacity_layer

    model, layer = CAPACITY_RULE_LAYER
    store_dir = Path(tensors or ROOT / "results" / "tensors") / model
    if not (store_dir / "manifest.json").exists():
        log(f"capacity rule: no {store_dir} (run make run first); skipped")
        return None
    cfg = load_config([ROOT / "config" / "paper.yaml"])
    cap = cfg["paper1"]["capacity"]
    prm = {"rank_rtol": cfg["rank_rtol"], "strong_threshold": cfg["tables"]["strong_threshold"],
           "scramble_draws": cfg["paper1"]["scramble_draws"], "sv_rtol": cfg["paper1"]["sv_rtol"],
           "restarts": cap["restarts"], "iters": cap["iters"], "sample_per_layer": cap["sample_per_layer"],
           "tol": cap["tol"], "window": cap["window"], "method": cap["method"]}
    f = TensorStore(store_dir).layer_factors(layer)
    out = {"model": model, "layer": layer, "restarts": prm["restarts"], "iters": prm["iters"],
           "tol": prm["tol"], "window": prm["window"], "method": prm["method"], "before_iters": CAPACITY_BEFORE_ITERS}
    caps = {}
    before = {**prm, "method": "gradient", "iters": CAPACITY_BEFORE_ITERS, "tol": 0.0, "window": 0}
    for name, p in (("fixed", before), ("rule", prm)):
        st = {}
        c0 = time.process_time()
        caps[name] = capacity_layer(f, f, model, model, layer, p, stats=st)["cap"]
        out[name] = {"svd": int(st["svd"]), "cpu_s": time.process_time() - c0}
    ok = np.isfinite(caps["fixed"])
    out["svd_ratio"] = out["rule"]["svd"] / max(out["fixed"]["svd"], 1)
    out["cpu_ratio"] = out["rule"]["cpu_s"] / max(out["fixed"]["cpu_s"], 1e-12)
    rel = (caps["rule"][ok] - caps["fixed"][ok]) / caps["fixed"][ok]
    out["max_rel_fall"] = float(max(0.0, -rel.min())) if ok.any() else 0.0
    out["max_rel_rise"] = float(max(0.0, rel.max())) if ok.any() else 0.0
    log(f"capacity {model} L{layer}: gradient x {CAPACITY_BEFORE_ITERS} -> {prm['method']} (cap {prm['iters']}, rule "
        f"{prm['tol']:g}/{prm['window']}): SVDs {out['fixed']['svd']} -> {out['rule']['svd']} ({out['svd_ratio']:.2f}), "
        f"CPU {out['fixed']['cpu_s']:.1f} -> {out['rule']['cpu_s']:.1f} s, Cap_hat max rel. fall {out['max_rel_fall']:.1e}, "
        f"rise {out['max_rel_rise']:.1e}")
    return out


def _fmt_x(v):
    return f"{v:,.0f}x" if v >= 100 else f"{v:.1f}x"


def capacity_rows(c) -> list:
    rows = []
    for name, v in (c or {}).get("shapes", {}).items():
        where = f"capacity search, {name}"
        rows += [
            (where, "per-head loop time / batched time per start-step", _fmt_x(v["speedup_over_loop"]), "–", None),
            (where, "unavoidable work (SVD + products timed alone) / batched step time", f"{100 * v['floor_share']:.0f}%", "–", None),
            (where, "step FLOP rate (31 d^3 per start-step) / numpy matmul 1024^3", f"{100 * v['share_of_matmul']:.0f}%", "–", None),
            (where, "Cap_hat path agrees with the loop (max rel. diff of P)", f"{v['max_rel_diff_P_vs_loop']:.0e}", "≤ 1e-12", v["max_rel_diff_P_vs_loop"] <= 1e-12),
        ]
    r = (c or {}).get("rule")
    if r:
        where = (f"capacity search at paper.yaml, {r['model']} layer {r['layer']} ({r['restarts']} restarts; after: "
                 f"{r.get('method', 'gradient')}, cap {r['iters']}, rule {r['tol']:g} / {r['window']} steps)")
        before = f"gradient x {r.get('before_iters', r['iters'])} fixed steps"
        rows += [
            (where, f"SVDs after / before ({before}: {r['fixed']['svd']:,})", f"{r['svd_ratio']:.2f}", "–", None),
            (where, f"CPU time after / before ({r['fixed']['cpu_s']:.1f} s)", f"{r['cpu_ratio']:.2f}", "–", None),
            (where, "Cap_hat: max relative fall, after vs before (a lower bound: a rise is allowed)",
             f"{r['max_rel_fall']:.1e}", f"≤ {CAPACITY_FALL_TOL:.0e}", r["max_rel_fall"] <= CAPACITY_FALL_TOL),
            (where, "Cap_hat: max relative rise, after vs before", f"{r.get('max_rel_rise', 0):.1e}", "–", None),
        ]
    return rows


def summarize(results: dict, env: dict) -> str:
    rows = []  # (stage, measure, value, target, ok)
    st = results.get("stages")
    targets = {"closure_core": 0.80, "null_within_rotation": 0.75, "null_within_reassign": 0.75, "null_cross_job": 0.75}
    if st:
        for k, v in st["stages"].items():
            rows.append((f"{k} ({st['precision']})", f"{v['flops']['total'] / 1e9:.1f} GFLOP in {v['seconds']:.2f} {st.get('clock', 'wall')}-s: FLOP rate / numpy matmul rate ({st['matmul_gflops']:.1f} GFLOP/s)",
                         f"{100 * v['share_of_matmul']:.0f}%" + (f" (rounds {min(v['share_rounds']) * 100:.0f}–{max(v['share_rounds']) * 100:.0f}%)" if v.get("share_rounds") else ""),
                         f"≥ {100 * targets[k]:.0f}%", v["share_of_matmul"] >= targets[k]))
    c = results.get("closure")
    if c:
        r = c["ratios"]
        rows += [
            ("closure, Qwen3-235B layer", "naive (materialize T, T²) time / headgeom Gram core time", _fmt_x(r["naive_over_gram_core"]), "≥ 100x", r["naive_over_gram_core"] >= 100),
            ("closure, Qwen3-235B layer", "FactoredMatrix-style time / headgeom Gram core time", _fmt_x(r["factored_over_gram_core"]), "≥ 1x", r["factored_over_gram_core"] >= 1),
            ("closure, Qwen3-235B layer", "naive time / full closure_layer time (+ ranks, principal coords)", _fmt_x(r["naive_over_closure_layer"]), "–", None),
            ("closure, Qwen3-235B layer", "FactoredMatrix-style time / full closure_layer time", _fmt_x(r["factored_over_closure_layer"]), "–", None),
            ("closure, Qwen3-235B layer", "all methods agree (max rel. err.)", f"{max(c['max_rel_err'].values()):.1e}", "< 1e-8", c["agree"]),
        ]
    p = results.get("pk")
    if p:
        rows += [
            ("PK cross-layer, Qwen2.5-7B", "cross_pairs FLOP rate (as pk_cross_job calls it) / numpy matmul FLOP rate", f"{100 * p['share_of_matmul']['cross_pairs']:.0f}%", "≥ 85%", p["share_of_matmul"]["cross_pairs"] >= 0.85),
            ("PK cross-layer, Qwen2.5-7B", "cross_pairs without the weighted measure / numpy matmul", f"{100 * p['share_of_matmul']['cross_pairs_rho_angle']:.0f}%", "–", None),
            ("PK cross-layer, Qwen2.5-7B", "cross_blocks GEMM alone / numpy matmul", f"{100 * p['share_of_matmul']['cross_blocks_gemm']:.0f}%", "–", None),
            ("PK cross-layer, Qwen2.5-7B", "scipy subspace_angles per pair / headgeom per pair, same outputs (rho, min angle; bases included)", _fmt_x(p["speedup_over_scipy"]), "≥ 20x", p["speedup_over_scipy"] >= 20),
            ("PK cross-layer, Qwen2.5-7B", "scipy per pair / headgeom per pair as the job runs (+ spectral-weighted measure)", _fmt_x(p["speedup_over_scipy_job"]), "–", None),
            ("PK cross-layer, Qwen2.5-7B", "agrees with scipy (rho rel., min angle deg)", f"{p['max_rel_err_rho_vs_scipy']:.0e}, {p['max_abs_err_min_angle_deg_vs_scipy']:.0e}", "< 1e-8, 1e-6", p["agree"]),
        ]
    n = results.get("nulls")
    if n:
        for name, row in n["shapes"].items():
            for null, v in row["nulls"].items():
                if "skipped" in v:
                    rows.append((f"nulls, {name}", f"{null}: samples/s per layer", "skipped (--quick)", "–", None))
                else:
                    rows.append((f"nulls, {name}", f"{null}: samples/s per layer (all 4 kinds)", f"{v['samples_per_second_per_layer']:.3g} ({v['seconds_per_layer_sample']:.1f} s/sample)", "–", None))
    nc = results.get("null_cross")
    if nc:
        for name, r in nc["shapes"].items():
            for dt in ("float64", "float32"):
                v = r[dt]
                rows.append((f"null cross pairs, {name} ({dt})", "blocks / slab packing / slab products (at a part's "
                             f"call, {v['gram_heads'][0]} x {v['gram_heads'][1]} heads): FLOP rate / GEMM rate",
                             f"{v['blocks_share']:.0%} / {v['pack_share']:.0%} / {v['gram_share']:.0%}",
                             "packing, products ≥ 80%" if dt == "float64" else "–",
                             min(v["pack_share"], v["gram_share"]) >= 0.8 if dt == "float64" else None))
                lp = v["layer_pair_s"]
                rows.append((f"null cross pairs, {name} ({dt})", "one layer pair, one sample and null: blocks s / projectors s",
                             f"{lp['blocks']:.2f} / {lp['projectors']:.2f} ({lp['blocks'] / lp['projectors']:.1f}x)", "–", None))
            rows.append((f"null cross pairs, {name}", "rho by projectors vs blocks (float64, max rel.); float32 vs float64 (max abs.)",
                         f"{r['float64']['rho_vs_blocks_max_rel']:.0e}; {r['float32']['rho_vs_float64_max_abs']:.0e}",
                         "< 1e-12; < 1e-5", r["float64"]["rho_vs_blocks_max_rel"] < 1e-12
                         and r["float32"]["rho_vs_float64_max_abs"] < r["float32"]["bound"]))
            rows.append((f"null cross pairs, {name}", "packing one head: per-head GEMM + gather s / slab packing s",
                         _fmt_x(r["gather_packing_s_per_head"] / r["slab_packing_s_per_head"]), "–", None))
    f = results.get("fetch")
    if f:
        rows.append(("fetch, loopback hub", "bytes transferred / bytes of the needed tensors", f"{f['ratio_transferred_over_needed']:.4f}", "–", None))
        rows.append(("fetch, loopback hub", "bytes transferred / checkpoint size", f"{100 * f['share_of_checkpoint']:.1f}%", "–", None))
    rows += capacity_rows(results.get("capacity"))
    o = results.get("overhead")
    if o:
        j = o["snakemake"]["job_imports"]
        rows.append(("per-job overhead", f"a job that does no work, with a per-layer job's imports (snakemake -c1, {o['jobs']} jobs): CPU s per job",
                     f"{j['per_job_cpu_s']:.2f} s (wall {j['per_job_wall_s']:.2f} s)", "–", None))
    e = results.get("e2e")
    if e:
        rows.append(("end to end", f"cold `make run` wall time (snakemake -c{e['cores']}, {e['jobs']} jobs)", f"{e['wall_s']:.0f} s" + ("" if e["returncode"] == 0 else f" (FAILED rc {e['returncode']})"), "≤ 300 s", e["returncode"] == 0 and e["wall_s"] <= 300))
        total = next((r for r in e.get("rules") or [] if r["rule"] == "total"), None)
        if total and total["overhead_s"] is not None and total["timed_wall_s"] > 0:
            rows.append(("end to end", "summed job wall time: start-up (wall - job function) / wall, from the run's logs "
                         "(`headgeom timings`)", f"{100 * total['overhead_s'] / total['timed_wall_s']:.0f}% of "
                         f"{total['timed_wall_s']:.0f} s", "–", None))
        pp = e.get("paper")
        if pp:
            rows.append(("end to end", f"`--configfile config/paper.yaml` after it, wall time (snakemake -c{e['cores']}, "
                         f"{pp['jobs']} jobs, choice_sensitivity included)", f"{pp['wall_s']:.0f} s"
                         + ("" if pp["returncode"] == 0 else f" (FAILED rc {pp['returncode']})"), "≤ 1200 s",
                         pp["returncode"] == 0 and pp["wall_s"] <= 1200))
        if o and e.get("jobs"):
            share = e["jobs"] * o["snakemake"]["job_imports"]["per_job_cpu_s"] / e["cores"] / e["wall_s"]
            rows.append(("end to end", "jobs x per-job overhead CPU / cores / `make run` wall time (the share startup takes)", f"{100 * share:.0f}%", "–", None))

    def mark(ok):
        return "–" if ok is None else ("PASS" if ok else "FAIL")

    lines = ["| stage | measure | value | target | |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {v} | {t} | {mark(ok)} |" for a, b, v, t, ok in rows]
    rt = env.get("numpy_openblas_runtime") or {}
    thr = (f"BLAS threads {rt.get('threads')} (OpenBLAS {rt.get('corename')}, numpy {env['numpy']}, scipy {env['scipy']}); "
           f"OMP_NUM_THREADS={env['env']['OMP_NUM_THREADS']} OPENBLAS_NUM_THREADS={env['env']['OPENBLAS_NUM_THREADS']}; "
           f"{env['affinity_cpus']} CPUs, load {env['loadavg_1m']:.2f} at start"
           + (f", {st['loadavg_1m_end']:.2f} after the stages" if st and "loadavg_1m_end" in st else "")
           + (f"; stages and PK shares timed by {st['clock']} time" if st and "clock" in st else "") + "; float64")
    notes = []
    if st:
        for k, v in st["stages"].items():
            notes.append(f"{k}: {st['notes'][k]}; FLOPs " + ", ".join(f"{a} {b / 1e9:.2f} G" for a, b in v["flops"].items()) + ".")
    if c:
        notes.append(f"closure: naive timed on {len(c['naive_sample'])} (head, V) evaluations and FactoredMatrix on "
                     f"{len(c['factored_heads'])} heads x (own, wrong V), both extrapolated to all {2 * c['shape']['n_heads']} evaluations; "
                     f"Gram core {c['stage_s']['gram_core']:.2f} s, closure_layer {c['stage_s']['closure_layer']:.2f} s, "
                     f"naive {c['stage_s']['naive_extrapolated']:.0f} s, FactoredMatrix {c['stage_s']['factored_extrapolated']:.0f} s per layer.")
    if p:
        notes.append(f"PK: {p['layer_pairs_timed']} of {p['layer_pairs_model']} layer pairs timed "
                     f"({p['pairs_per_layer_pair']} head pairs each, readers Q, K, V); cross_pairs {p['gflops']['cross_pairs']:.1f} GFLOP/s "
                     f"vs numpy matmul {p['gflops']['numpy_matmul']:.1f} GFLOP/s ({p['matmul_shape'][0]}x{p['matmul_shape'][1]} @ "
                     f"{p['matmul_shape'][1]}x{p['matmul_shape'][2]}); per head pair headgeom {1e3 * p['per_pair_s']['headgeom_rho_angle']:.2f} ms "
                     f"(rho + min angle, bases as pk_cross_job computes them) vs scipy {1e3 * p['per_pair_s']['scipy_subspace_angles']:.1f} ms "
                     f"(mean over {p['scipy_sample_pairs']} pairs); the whole model's cross stage ≈ "
                     f"{p['stage_extrapolated_full_model_s'] / 60:.0f} min on one thread.")
    if n:
        notes.append("nulls: " + n["what"] + ".")
    if nc:
        notes.append("null cross pairs: " + nc["what"] + ".")
    if results.get("capacity"):
        notes.append(results["capacity"]["what"] + ".")
    head = "# headgeom bench\n\n" + time.strftime("%Y-%m-%d %H:%M:%S") + "\n\n" + thr + "\n\n"
    return head + "\n".join(lines) + "\n\n" + "\n".join(f"* {x}" for x in notes) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    _set_threads(args)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    env = hb.thread_settings()
    log("threads: " + json.dumps(env["env"]) + f"; OpenBLAS runtime threads {(env['numpy_openblas_runtime'] or {}).get('threads')}")
    (outdir / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    wanted = [s for s in args.only.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}; known: {SECTIONS}")
    funcs = {"stages": bench_stages, "closure": bench_closure, "pk": bench_pk, "nulls": bench_nulls,
             "null_cross": bench_null_cross, "fetch": bench_fetch,
             "capacity": bench_capacity, "overhead": bench_overhead}
    results = {}
    t0 = time.perf_counter()
    for name in wanted:
        results[name] = funcs[name](args)
        (outdir / f"{name}.json").write_text(json.dumps(results[name], indent=1, default=str) + "\n")
    if args.e2e:
        results["e2e"] = bench_e2e(args)
        (outdir / "e2e.json").write_text(json.dumps(results["e2e"], indent=1) + "\n")
    md = summarize(results, env) + f"\nbench wall time {time.perf_counter() - t0:.0f} s\n"
    if args.e2e and results["e2e"].get("rules_markdown"):
        md += "\n" + results["e2e"]["rules_markdown"]
    if args.e2e and (results["e2e"].get("paper") or {}).get("rules_markdown"):
        md += "\n`--configfile config/paper.yaml` after it:\n\n" + results["e2e"]["paper"]["rules_markdown"]
    (outdir / "summary.md").write_text(md)
    print("\n" + md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
