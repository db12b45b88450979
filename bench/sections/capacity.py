"""``make bench`` section ``capacity``: paper 1's batched capacity search against the per-head loop
it replaced and its own floor, and the search at config/paper.yaml's settings on one embedded layer;
its rows of the summary table."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import baselines as hb

from .common import ROOT, log, relerr

CAPACITY_RULE_LAYER = ("smollm2-135m", 10)  # 6 selected heads (d_head 64): the representative layer
CAPACITY_FALL_TOL = 1e-4  # the stated tolerance of the L-BFGS cap (docs/performance.md)
CAPACITY_BEFORE_ITERS = 300  # the papers' step count, run by the gradient ascent before the L-BFGS cap


def bench_capacity(args) -> dict:
    """Paper 1's capacity search (projected ascent with SVD retraction) at paper settings' batch
    (6 selected heads x 8 restarts per layer): per start and step, the batched ascent against the
    per-head loop it replaced (tests/helpers/capacity_ref.py) and against its own unavoidable work
    (one d x d SVD and the products, timed alone on the same stacked batch)."""
    from capacity_ref import ref_projected_ascent

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


def fmt_x(v):
    return f"{v:,.0f}x" if v >= 100 else f"{v:.1f}x"


def capacity_rows(c) -> list:
    rows = []
    for name, v in (c or {}).get("shapes", {}).items():
        where = f"capacity search, {name}"
        rows += [
            (where, "per-head loop time / batched time per start-step", fmt_x(v["speedup_over_loop"]), "–", None),
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
