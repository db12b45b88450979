"""``make bench`` sections ``nulls``, ``null_cross`` and ``stages``: null samples per second, the
cross-layer null pairs' two routes, and each heavy stage's FLOP rate as a share of the same run's GEMM rate."""

from __future__ import annotations

import os
import time

import numpy as np

import baselines as hb

from .common import log


def bench_nulls(args) -> dict:
    from headgeom.methods.nulls import NULL_BASES_FIRST_PASS, null_factors
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
                    B, r = orthonormal_bases(Xn, first_pass=NULL_BASES_FIRST_PASS, overwrite_x=True)  # as null_spaces
                    t2 = time.perf_counter()
                    pk_within(B, r, angles="min")  # as pk_null_within_job
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
    one d x d block per pair (2 D d^2) and, for the smallest angle, each block's Gram and the Cholesky
    factorization that certifies it below the largest (2 d^3 + d^3 / 3; overlap.sigma_max_largest: the
    eigenvalues of the few blocks it cannot certify are not counted)."""
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
        out["smallest_angle"] = npairs * (2 * d**3 + d**3 // 3)
    out["total"] = sum(out.values())
    return out


def share_with_part_at_rate(total_flops: float, part_flops: float, other_s: float, rate: float) -> float:
    """The share of ``rate`` (FLOP/s) a stage of ``total_flops`` would reach if the part of it that does
    ``part_flops`` ran at ``rate`` and the rest took ``other_s`` seconds, as timed: what bounds the stage
    while the rest stays as it is."""
    return total_flops / (other_s + part_flops / rate) / rate


def bench_stages(args) -> dict:
    """Each heavy stage's FLOP rate over numpy matmul's, timed interleaved in this process."""
    from headgeom.methods.nulls import null_factors, null_spaces
    from headgeom.methods.overlap import cross_pairs, factor_stack, pk_within, stacked, stacked_heads
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
            B, r = null_spaces(Xk[k], null, rng_for("bench", null, k, 0), prec)
            pk_within(B, r, angles="min")  # as pk_null_within_job

    def null_cross_pieces():  # one writer draw, one reader draw per kind, one layer pair's blocks
        Bw, rw = null_spaces(Xw_plain, "rotation", rng_for("bench", "w"), prec)
        Sw = stacked(Bw)
        for k in ("Q", "K", "V"):
            Br, rr = null_spaces(Xr[k], "rotation", rng_for("bench", "r", k), prec)
            cross_pairs(Bw, rw, Br, rr, angles=False, Sw=Sw)

    cache = {}

    def cross_blocks_only():
        if "w" not in cache:
            cache["w"] = null_spaces(Xw_plain, "rotation", rng_for("bench", "w"), prec)
            cache["r"] = {k: null_spaces(Xr[k], "rotation", rng_for("bench", "r", k), prec) for k in ("Q", "K", "V")}
        Bw, rw = cache["w"]
        Sw = stacked(Bw)  # as pk_null_cross_job: once per writer and reader layer
        for k, (Br, rr) in cache["r"].items():
            cross_pairs(Bw, rw, Br, rr, angles=False, Sw=Sw)

    from headgeom.methods.grams import LayerGrams

    g235 = LayerGrams(f235)  # its products, once: the inputs of the d^3 terms' timing
    # the closure core's parts, each product on a fresh LayerGrams (its products are cached properties)
    closure_parts = {"closure_A": lambda: LayerGrams(f235).A, "closure_B": lambda: LayerGrams(f235).B,
                     "closure_M_pair": lambda: LayerGrams(f235).M_own,
                     "closure_terms": lambda: hb.gram_core_terms(g235)}

    def rotation_draws():  # the rotation null's sampler alone (Gaussian, Householder QR, its application), as null_within's
        for k in ("O", "Q", "K", "V"):
            null_factors(Xk[k], "rotation", rng_for("bench", "rotation", k, 0), prec)

    fns = {"matmul": lambda: X @ Y, "closure_core": lambda: hb.gram_core(f235), **closure_parts,
           "rotation_draws": rotation_draws,
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
    # where the closure core's time goes, and the share it would reach with its M products at the GEMM rate and
    # the rest as measured: the A Grams (per-head syrk) and the d^3 terms (not counted) bound it from above
    cf = rows["closure_core"]["flops"]  # its parts and their total
    parts_s = {k.removeprefix("closure_"): best[k] for k in closure_parts}
    rows["closure_core"]["parts_seconds"] = parts_s
    rows["closure_core"]["share_with_M_at_matmul_rate"] = share_with_part_at_rate(
        cf["total"], cf["M_pair"], parts_s["A"] + parts_s["B"] + parts_s["terms"], rate)
    # the same for a rotation sample: its draws (the sampler) as timed, the bases and the pairs at the GEMM rate
    rf = rows["null_within_rotation"]["flops"]  # its parts and their total
    draw_fl = rf["haar_qr"] + rf["rotate"]
    rows["null_within_rotation"]["parts_seconds"] = {"draws": best["rotation_draws"]}
    rows["null_within_rotation"]["draws_share_of_matmul"] = draw_fl / best["rotation_draws"] / rate
    rows["null_within_rotation"]["share_with_rest_at_matmul_rate"] = share_with_part_at_rate(
        rf["total"], rf["total"] - draw_fl, best["rotation_draws"], rate)
    res = {"matmul_gflops": rate / 1e9, "matmul_shape": [H * d, D, H * d], "precision": prec, "clock": args.clock,
           "loadavg_1m_end": os.getloadavg()[0], "stages": rows,
           "timings": {k: hb.summary(v) for k, v in times.items()},
           "notes": {"closure_core": "Qwen3-235B layer: LayerGrams A (per head) and B (per KV group), symmetric "
                                     "(D d (d + 1) each), M own + wrong group (2 D d^2 each), then P, alpha, g_T, "
                                     "P_wrong (their d^3 terms not counted)",
                     "null_within_rotation": "Qwen2.5-7B layer, one sample, kinds O, Q, K, V: Householder QR of the "
                                             "m x m Gaussian (dgeqrf count 4/3 m^3, Q not formed) + applying it "
                                             "(2 D m^2), CholeskyQR2 bases (2 syrk + 2 GEMM per head), within-layer "
                                             "pair blocks (2 D d^2 per pair) + the smallest angle (2 d^3 + d^3 / 3 per pair: "
                                             "Gram + Cholesky certificate)",
                     "null_within_reassign": "as rotation without the Haar QR and its application",
                     "null_cross_job": f"Qwen2.5-7B, {L} layers, one sample of the rotation null: {L} writer and {3 * L} "
                                       f"reader draws (QR + its application + bases) and {npairs} layer pairs of basis GEMMs for Q, K, V; "
                                       "time = L x (one writer + three reader draws) + pairs x (one pair's blocks), timed separately"}}
    for k, v in rows.items():
        log(f"stages {k}: {v['flops']['total'] / 1e9:.1f} GFLOP in {v['seconds']:.2f}s = {v['gflops']:.1f} GFLOP/s, "
            f"{100 * v['share_of_matmul']:.0f}% of matmul ({rate / 1e9:.1f})")
    return res


def bench_null_cross_threads(args) -> dict:
    """A pk_null_cross part's phases on 1 and on 2 threads, at the Qwen3-235B shape: the draws (worker threads,
    one BLAS thread each: headgeom.jobs.draws.Draws) of 2 writer and 2 reader layers, both nulls, the packing of
    their projectors (every slab; on the same workers, methods.projectors.pack_tasks) and, on the job's BLAS
    threads, a slab product at the design's tile (the writer heads by the reader heads of the fan-out's tile at this
    shape under config/paper.yaml, over an eighth of a slab; the 2 x 2 layers' whole projector_gram, on 1 and 2
    threads, is the results compared); wall time,
    each phase's speed-up / 2 beside the cost model's THREAD_EFFICIENCY, and 1 and 2 threads' results compared
    (draws: the same bits; products: within 1e-13 relative). Fails (``ok`` false) when a phase's efficiency is
    under the model's or the results differ beyond that."""
    from threadpoolctl import threadpool_limits

    from headgeom.core.seeds import rng_for
    from headgeom.jobs.draws import Draws
    from headgeom.methods.nulls import null_spaces
    from headgeom.methods.overlap import stacked_heads
    from headgeom.methods.projectors import pack_sides, projector_gram, projector_slabs, slab_width
    from headgeom.schedule.costs import THREAD_EFFICIENCY

    s = hb.QWEN3_235B
    D, d, H, G = s["d_model"], s["d_head"], s["n_heads"], s["n_kv"]
    rng = np.random.default_rng(0)
    heads = {"O": H, "Q": H, "K": G, "V": G}
    X = {(k, l): stacked_heads(rng.standard_normal((heads[k], D, d))) for l in range(2) for k in heads}

    def tasks():
        return [((null, k, l), (lambda k=k, l=l, null=null: null_spaces(
            X[k, l], null, rng_for("bench", null, k, l), prepared={}, key=(k, l))))
            for null in ("rotation", "reassign") for l in range(2) for k in heads]

    out = {"shape": "qwen3-235b", "what": "wall seconds of one part's phases (2 writer and 2 reader layers, both "
                                          "nulls) on 1 and 2 threads; efficiency = speed-up / 2"}

    # the slab products at the design's tile: a GEMM of its writer heads by its reader heads (the fan-out's side
    # at this shape under config/paper.yaml) over an eighth of a slab's packed entries
    from headgeom.core.config import ROOT, load_config
    from headgeom.schedule import designs, fanout
    from headgeom.schedule.families import JOBS

    paper = designs.global_design(load_config([ROOT / "config" / "models.yaml", ROOT / "config" / "paper.yaml"]))
    fields = {"d_model": D, "d_head": d, "n_heads": H, "n_kv_heads": G, "n_layers": s["n_layers"]}
    side = fanout.max_tile_side(JOBS["pk_null_cross"], fields, paper)
    out["tile_side"], out["cross_threads"] = side, paper["pk"]["nulls"]["cross_threads"]
    Pw = rng.standard_normal((side * H, 2**15))
    Pr = rng.standard_normal((side * (H + 2 * G), 2**15))
    out["gram_shape"] = [Pw.shape[0], Pr.shape[0], Pw.shape[1]]

    def slab_product_seconds():
        t0 = time.perf_counter()
        Pw @ Pr.T
        return time.perf_counter() - t0

    def pack_all(writers, readers, pool):  # every slab of both sides, as a job's projector_gram packs them
        nw, nr = sum(B.shape[0] for B in writers), sum(B.shape[0] for B in readers)
        Wb, Rb = np.empty((nw, slab_width(D))), np.empty((nr, slab_width(D)))
        for slab in projector_slabs(D):  # on several threads on the draw workers, as pk_null_cross_job packs
            pack_sides(writers, readers, slab, Wb[:, :slab.size], Rb[:, :slab.size], pool.tasks_runner)
    draws, grams = {}, {}
    for t in (1, 2):
        t0 = time.perf_counter()
        with Draws(t) as pool:
            draws[t] = dict(pool.each(tasks()))
        out[f"draws_{t}_s"] = time.perf_counter() - t0
        writers = [draws[t]["rotation", "O", l][0] for l in range(2)]
        readers = [draws[t]["rotation", k, l][0] for l in range(2) for k in ("Q", "K", "V")]
        with Draws(t) as pool, threadpool_limits(limits=t):
            grams[t] = projector_gram(writers, readers, run_tasks=pool.tasks_runner)
            t0 = time.perf_counter()
            pack_all(writers, readers, pool)
            out[f"packing_{t}_s"] = time.perf_counter() - t0
            out[f"gram_{t}_s"] = slab_product_seconds()
        log(f"null_cross_threads: {t} thread(s): draws {out[f'draws_{t}_s']:.1f} s, packing {out[f'packing_{t}_s']:.1f} s, "
            f"slab products {out[f'gram_{t}_s']:.1f} s")
    out["draws_same_bits"] = bool(all(np.array_equal(draws[1][k][0], draws[2][k][0])
                                      and np.array_equal(draws[1][k][1], draws[2][k][1]) for k in draws[1]))
    # the products on 2 BLAS threads may round apart from 1 thread's (OpenBLAS's split of a GEMM's rows)
    out["products_max_rel_diff"] = float(np.max(np.abs(grams[2] - grams[1]) / np.abs(grams[1])))
    out["ok"] = out["draws_same_bits"] and out["products_max_rel_diff"] <= 1e-13
    for phase in ("draws", "packing", "gram"):
        e = out[f"{phase}_1_s"] / (2 * out[f"{phase}_2_s"])
        out[f"{phase}_efficiency"], out[f"{phase}_model"] = e, THREAD_EFFICIENCY[phase]
        out["ok"] = out["ok"] and e >= THREAD_EFFICIENCY[phase]
    log(f"null_cross_threads: efficiency on 2 threads: draws {out['draws_efficiency']:.2f} (model "
        f"{THREAD_EFFICIENCY['draws']}), packing {out['packing_efficiency']:.2f} (model {THREAD_EFFICIENCY['packing']}), "
        f"slab products {out['gram_efficiency']:.2f} (model {THREAD_EFFICIENCY['gram']}); "
        f"draws the same bits: {out['draws_same_bits']}, products within {out['products_max_rel_diff']:.1e} "
        f"relative; load {os.getloadavg()[0]:.1f}")
    return out
