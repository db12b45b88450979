"""``make bench`` sections ``closure`` and ``pk``: the closure Gram core and the PK cross-layer kernel
at the papers' layer shapes, against their baselines (naive, FactoredMatrix-style, scipy)."""

from __future__ import annotations

import time

import numpy as np

import baselines as hb

from .common import log, relerr


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
