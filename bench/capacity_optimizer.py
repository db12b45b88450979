"""The numbers docs/methods.md §1.7 states about the capacity search, from random cores with a seed.

    python bench/capacity_optimizer.py [--seeds 5] [--cores 20] [--dim 6] [--roundoff 2000] [--out FILE.json]

Each seed 0 .. seeds − 1 (or only --seed S) gives one line per part, and the last lines add the seeds up.

routes      Cap_hat of the two routes on ``--cores`` random d × d cores (K Gaussian, D uniform on
            [0.1, 1], drawn from ``numpy.random.default_rng(seed)``): the gradient route for 300 fixed
            steps (tol 0) against config/paper.yaml's L-BFGS settings (method, iters, tol, window), both
            with paper.yaml's restarts; the Haar-random starts are seeded by
            rng_for("bench-seed<seed>", 0, core, r, "capacity"). Prints how many cores the L-BFGS bound
            is higher / lower / equal on, and the largest and median of (L-BFGS − gradient).
roundoff    on ``--roundoff`` random cores (the next draws of the same generator), Cap_hat's own
            exp(log P) of K (the value the ascent keeps for the trained start, logP_and_grad) against
            P = closure.P_of(K, D) (the P that E uses): the largest relative difference and on how
            many cores exp(log P) is the smaller (where E = (P − R)/(Cap_hat − R) can exceed 1 by
            that difference when no start climbs above K).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from headgeom.methods import closure  # noqa: E402
from headgeom.methods.paper1 import capacity as C  # noqa: E402

GRADIENT_STEPS = 300


def paper_capacity() -> dict:
    return yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())["paper1"]["capacity"]


def cores(rng, n: int, d: int):
    K = rng.standard_normal((n, d, d))
    D = rng.uniform(0.1, 1.0, (n, d))
    return K, D


def routes(seed: int, n: int, d: int) -> dict:
    cap = paper_capacity()
    K, D = cores(np.random.default_rng(seed), n, d)
    model = f"bench-seed{seed}"
    heads = list(range(n))
    grad = C.feasible_capacity_batch(K, D, model, 0, heads, cap["restarts"], GRADIENT_STEPS, 0.0, 0, method="gradient")
    lbfgs = C.feasible_capacity_batch(K, D, model, 0, heads, cap["restarts"], cap["iters"], float(cap["tol"]),
                                      cap["window"], method=cap["method"])
    diff = np.array([b["cap"] - a["cap"] for a, b in zip(grad, lbfgs)])
    return {"seed": seed, "diff": diff.tolist(), "cores": n, "dim": d, "gradient_steps": GRADIENT_STEPS,
            "lbfgs": {k: cap[k] for k in ("method", "restarts", "iters", "tol", "window")},
            "higher": int((diff > 0).sum()), "lower": int((diff < 0).sum()), "equal": int((diff == 0).sum()),
            "max_gain": float(diff.max()), "median_gain": float(np.median(diff)),
            "largest_loss": float(-diff.min()) if (diff < 0).any() else 0.0}


def roundoff(seed: int, n: int, d: int, skip: int) -> dict:
    rng = np.random.default_rng(seed)
    cores(rng, skip, d)  # the draws routes() used
    K, D = cores(rng, n, d)
    f, _ = C.logP_and_grad(K, D)
    cap = np.exp(f)
    P = closure.P_of(K, D)
    rel = (cap - P) / P
    return {"seed": seed, "cores": n, "dim": d, "max_rel_diff": float(np.abs(rel).max()), "rel": rel,
            "exp_logP_smaller": int((cap < P).sum()), "exp_logP_larger": int((cap > P).sum())}


def _routes_line(label: str, r: dict) -> str:
    return (f"routes ({label}, {r['cores']} cores {r['dim']}x{r['dim']}, gradient x {GRADIENT_STEPS} vs paper.yaml's "
            f"{r['lbfgs']}): L-BFGS higher on {r['higher']}, lower on {r['lower']}, equal on {r['equal']}; "
            f"largest gain {r['max_gain']:.2g}, median {r['median_gain']:.2g}, largest loss {r['largest_loss']:.2g}")


def _roundoff_line(label: str, o: dict) -> str:
    return (f"roundoff ({label}, {o['cores']} cores): |exp(log P) - P_of| / P_of up to {o['max_rel_diff']:.2g}; "
            f"exp(log P) smaller on {o['exp_logP_smaller']}, larger on {o['exp_logP_larger']}")


def summed(routes_: list[dict], roundoff_: list[dict]) -> tuple[dict, dict]:
    diff = np.concatenate([r["diff"] for r in routes_])
    rel = np.concatenate([o["rel"] for o in roundoff_])
    r = dict(routes_[0], cores=int(diff.size), higher=int((diff > 0).sum()), lower=int((diff < 0).sum()),
             equal=int((diff == 0).sum()), max_gain=float(diff.max()), median_gain=float(np.median(diff)),
             largest_loss=float(-diff.min()) if (diff < 0).any() else 0.0)
    o = dict(roundoff_[0], cores=int(rel.size), max_rel_diff=float(np.abs(rel).max()),
             exp_logP_smaller=int((rel < 0).sum()), exp_logP_larger=int((rel > 0).sum()))
    return r, o


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. seeds - 1")
    ap.add_argument("--seed", type=int, help="only this seed")
    ap.add_argument("--cores", type=int, default=20)
    ap.add_argument("--dim", type=int, default=6)
    ap.add_argument("--roundoff", type=int, default=2000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    seeds = [a.seed] if a.seed is not None else list(range(a.seeds))
    rs, os_ = [], []
    for seed in seeds:
        rs.append(routes(seed, a.cores, a.dim))
        os_.append(roundoff(seed, a.roundoff, a.dim, a.cores))
        print(_routes_line(f"seed {seed}", rs[-1]))
        print(_roundoff_line(f"seed {seed}", os_[-1]))
    label = f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    r, o = summed(rs, os_)
    print(_routes_line(label, r))
    print(_roundoff_line(label, o))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        clean = [{k: v for k, v in x.items() if k not in ("diff", "rel")} for x in rs + os_ + [r, o]]
        a.out.write_text(json.dumps({"seeds": seeds, "per_seed": clean[:-2], "routes": clean[-2], "roundoff": clean[-1]},
                                    indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
