"""Cap_hat and SVD count of paper 1's capacity search, before (the gradient ascent, fixed steps:
--before-iters, default 300, the papers' step count) against after (the configured search: its
method, cap and convergence rule), on the embedded models' tensor stores (one BLAS thread, CPU time).

    python bench/capacity_convergence.py results/tensors --configfile config/paper.yaml \
        [--models gemma3-270m ...] [--layers-every 3] [--out results/bench/capacity_convergence.json]

Per layer the search runs once with the rule off (tol = 0: the fixed-step search, every start to
the cap) recording log P of every start after every step; a stopped start's trajectory is a prefix
of that one, so the rule's Cap_hat and SVD count for each (tol, window) follow from the trace
exactly (the derived rules are the gradient ascent's). The configured search is also run for real
on each layer (its own CPU time and SVD count); where it is the gradient ascent with the same cap,
its Cap_hat is checked against the one derived from the trace."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402  (after the BLAS thread settings)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headgeom.io.store import TensorStore  # noqa: E402
from headgeom.core.config import load_config  # noqa: E402
from headgeom.methods.paper1 import capacity_layer  # noqa: E402

RULES = [(1e-5, 20), (1e-6, 20), (1e-6, 50), (1e-7, 20), (1e-8, 20), (1e-9, 20)]


def params_of(cfg) -> dict:
    cap = cfg["paper1"]["capacity"]
    return {"rank_rtol": cfg["rank_rtol"], "strong_threshold": cfg["tables"]["strong_threshold"],
            "scramble_draws": cfg["paper1"]["scramble_draws"], "sv_rtol": cfg["paper1"]["sv_rtol"],
            "restarts": cap["restarts"], "iters": cap["iters"], "sample_per_layer": cap["sample_per_layer"],
            "tol": cap.get("tol", 0.0), "window": cap.get("window", 0), "method": cap.get("method", "gradient")}


def derive(trace, steps, restarts, tol, window):
    """(Cap_hat per head, SVD count) of the rule (tol, window) from a fixed-step trace (row t:
    log P after t steps, row 0 the start)."""
    F = np.asarray(trace)
    n = F.shape[1]
    stop = np.array(steps, dtype=np.int64).copy()
    for j in range(n):
        for t in range(window, min(stop[j], F.shape[0] - 1) + 1):
            g = F[t, j] - F[t - window, j]
            if np.isfinite(g) and g < tol:
                stop[j] = t
                break
    fend = F[np.minimum(stop, F.shape[0] - 1), np.arange(n)]
    return np.exp(fend).reshape(-1, restarts).max(axis=1), int(stop.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tensors")
    ap.add_argument("--configfile", action="append", default=[])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--layers-every", type=int, default=1)
    ap.add_argument("--layers", type=int, nargs="*")
    ap.add_argument("--before-iters", type=int, default=300, help="steps of the fixed gradient search (before)")
    ap.add_argument("--out", default="results/bench/capacity_convergence.json")
    a = ap.parse_args()
    cfg = load_config(a.configfile)
    prm = params_of(cfg)
    fixed = {**prm, "method": "gradient", "iters": a.before_iters, "tol": 0.0, "window": 0}
    same_search = prm["method"] == "gradient" and prm["iters"] == a.before_iters
    models = a.models or sorted(p.name for p in Path(a.tensors).iterdir() if (p / "manifest.json").exists())
    res = {"params": prm, "before": fixed, "rules": [list(r) for r in RULES], "models": {}}
    for m in models:
        store = TensorStore(Path(a.tensors) / m)
        L = int(store.manifest["fields"]["n_layers"])
        layers = a.layers if a.layers else list(range(0, L, a.layers_every))
        rec = {"layers": layers, "n_layers": L, "cap_fixed": [], "cap_rule": [], "svd_fixed": 0, "svd_rule": 0,
               "cpu_fixed": 0.0, "cpu_rule": 0.0, "derived": {f"{t:g}/{w}": {"cap": [], "svd": 0} for t, w in RULES},
               "rule_vs_derived": 0.0}
        for layer in layers:
            f = store.layer_factors(layer)
            st = {"trace": []}
            c0 = time.process_time()
            out = capacity_layer(f, f, m, m, layer, fixed, stats=st)
            rec["cpu_fixed"] += time.process_time() - c0
            ok = np.isfinite(out["cap"])
            rec["cap_fixed"] += out["cap"][ok].tolist()
            rec["svd_fixed"] += st["svd"]
            st2 = {}
            c0 = time.process_time()
            out2 = capacity_layer(f, f, m, m, layer, prm, stats=st2)
            rec["cpu_rule"] += time.process_time() - c0
            rec["cap_rule"] += out2["cap"][ok].tolist()
            rec["svd_rule"] += st2["svd"]
            if st["trace"]:
                # steps of the fixed run per start: where log P stopped changing because eta fell is
                # still a step taken; the fixed run took min(iters, eta stop) steps, recorded in trace
                steps = _fixed_steps(st["trace"], a.before_iters)
                for t, w in RULES:
                    caps, svd = derive(st["trace"], steps, prm["restarts"], t, w)
                    d = rec["derived"][f"{t:g}/{w}"]
                    d["cap"] += caps.tolist()
                    d["svd"] += svd
                if same_search and prm["tol"] > 0 and prm["window"] > 0:
                    caps, _ = derive(st["trace"], steps, prm["restarts"], prm["tol"], prm["window"])
                    rec["rule_vs_derived"] = max(rec["rule_vs_derived"],
                                                 float(np.max(np.abs(caps - out2["cap"][ok]))) if ok.any() else 0.0)
            print(f"{m} L{layer}: {int(ok.sum())} heads, fixed {st['svd']} SVDs, rule {st2['svd']} SVDs, "
                  f"max |dCap| {np.max(np.abs(out['cap'][ok] - out2['cap'][ok])) if ok.any() else 0:.2e}", flush=True)
        a0, a1 = np.array(rec["cap_fixed"]), np.array(rec["cap_rule"])
        rec["max_abs"] = float(np.max(np.abs(a1 - a0))) if a0.size else 0.0
        rec["max_rel"] = float(np.max(np.abs(a1 - a0) / np.abs(a0))) if a0.size else 0.0
        rec["max_rise"] = float(np.max(a1 - a0)) if a0.size else 0.0
        rel = (a1 - a0) / np.abs(a0) if a0.size else np.zeros(1)
        rec["max_rel_fall"] = float(max(0.0, -rel.min()))
        rec["max_rel_rise"] = float(max(0.0, rel.max()))
        rec["median_rel_change"] = float(np.median(rel))
        rec["heads_fallen_over_1e-5"] = int(np.sum(rel < -1e-5))
        for d in rec["derived"].values():
            c = np.array(d["cap"])
            d["max_rel"] = float(np.max(np.abs(c - a0) / np.abs(a0))) if a0.size else 0.0
            d["svd_ratio"] = d["svd"] / max(rec["svd_fixed"], 1)
            del d["cap"]
        res["models"][m] = rec
        print(json.dumps({k: v for k, v in rec.items() if k not in ("cap_fixed", "cap_rule")}), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))


def _fixed_steps(trace, iters):
    """Steps each start of the fixed run took: the cap, or fewer where its step fell below 1e-12
    (projected_ascent stops every start at once when all are stopped, so the trace may be shorter
    than iters; a start stopped by eta earlier shows as constant log P, which costs no SVD: those
    steps are not in the fixed run's count either, but the trace cannot tell them apart, so this
    returns the trace length for every start, an upper bound used only for the derived rules)."""
    return np.full(np.asarray(trace).shape[1], len(trace) - 1, dtype=np.int64)


if __name__ == "__main__":
    main()
